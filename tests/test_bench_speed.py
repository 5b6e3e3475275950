"""recipes/bench/speed.py: interleaved training-cost ratios of bench configurations."""
import json
import sys

from harness import ROOT, run, toy_task, train_parse

SPEED = ROOT / "recipes" / "bench" / "speed.py"


def test_speed_ratios_and_table(tiny_bin, tmp_path):
    table = tmp_path / "RESULTS.md"
    table.write_text("# bench\n\nintro\n", encoding="utf-8")
    out = tmp_path / "jobA"
    args = [sys.executable, SPEED, "--data", tiny_bin, "--configs", "twt_scalenorm_fixnorm",
            "--rounds", "2", "--steps", "1", "--warmup", "1", "--max-tokens", "300",
            "--out", out, "--table", table]
    run(args)
    res = json.loads((out / "speed.json").read_text())
    # the baseline is added first and is its own reference in every round
    assert list(res["configs"]) == ["transformer", "twt_scalenorm_fixnorm"]
    assert res["configs"]["transformer"]["ratios"] == [1.0, 1.0]
    twt = res["configs"]["twt_scalenorm_fixnorm"]
    assert len(twt["seconds"]) == 2 and all(s > 0 for s in twt["seconds"])
    # same dims: ScaleNorm's one scalar per norm replaces LayerNorm's 2d parameters
    assert 0 < res["configs"]["transformer"]["params"] - twt["params"] < 0.01 * twt["params"]
    text = table.read_text()
    assert text.startswith("# bench\n\nintro\n") and "<!-- speed:table -->" in text
    assert text.count("| jobA |") == 2
    run(args)  # a re-run of the same job replaces its rows instead of adding more
    assert table.read_text().count("| jobA |") == 2


def test_speed_refuses_other_tasks(tiny_bin, tmp_path):
    p = run([sys.executable, SPEED, "--data", tiny_bin, "--configs", "concat_rand", "--rounds", "1",
             "--steps", "1", "--out", tmp_path / "j"], check=False)
    assert p.returncode != 0 and "concat_rand" in p.stderr and "plain translation" in p.stderr


def test_speed_universal_configurations(tmp_path):
    """Gu ch. 5's cost ratio: ULR+MoLE vs Multi-NMT on one universal folder, the same batches for both."""
    from harness import universal_corpus
    binp = universal_corpus(tmp_path / "uni")
    out = tmp_path / "gu5"
    run([sys.executable, SPEED, "--data", binp.parent, "--baseline", "gu5_multi", "--configs", "gu5_ulr_mole",
         "--rounds", "2", "--steps", "1", "--warmup", "1", "--max-tokens", "300", "--out", out])
    res = json.loads((out / "speed.json").read_text())
    assert list(res["configs"]) == ["gu5_multi", "gu5_ulr_mole"]
    assert res["configs"]["gu5_multi"]["ratios"] == [1.0, 1.0]
    assert all(s > 0 for s in res["configs"]["gu5_ulr_mole"]["seconds"])
    # ULR (e_U, A) and MoLE (the experts and the gate) add parameters
    assert res["configs"]["gu5_ulr_mole"]["params"] > res["configs"]["gu5_multi"]["params"]
    # a universal configuration timed against a plain-translation baseline is refused
    p = run([sys.executable, SPEED, "--data", binp.parent, "--configs", "gu5_ulr", "--rounds", "1",
             "--steps", "1", "--out", tmp_path / "j"], check=False)
    assert p.returncode != 0 and "gu5_ulr" in p.stderr and "--baseline gu5_multi" in p.stderr


def test_speed_conversation_configurations(tmp_path):
    """Maruf ch. 5's cost ratio: the Bi-MSMT context models vs the base on the same conversation batches."""
    import shutil

    from harness import fairseq
    fx = ROOT / "tests" / "data" / "conversations"
    binp = tmp_path / "conv" / "bin"
    fairseq("preprocess", "-s", "src", "-t", "tgt", "--joined-dictionary", "--trainpref", fx / "train",
            "--validpref", fx / "valid", "--destdir", binp, "--workers", "1", user_dir=False)
    shutil.copyfile(fx / "train.conv", binp / "train.conv")
    shutil.copyfile(fx / "valid.conv", binp / "valid.conv")
    out = tmp_path / "maruf5"
    run([sys.executable, SPEED, "--data", binp.parent, "--baseline", "maruf5_base", "--configs",
         "maruf5_src_lsa,maruf5_dual", "--rounds", "2", "--steps", "1", "--warmup", "1", "--max-tokens", "2048",
         "--out", out])
    res = json.loads((out / "speed.json").read_text())
    assert list(res["configs"]) == ["maruf5_base", "maruf5_src_lsa", "maruf5_dual"]
    assert res["configs"]["maruf5_base"]["ratios"] == [1.0, 1.0]
    # the Turn-RNNs, the attention and the gate add parameters; the dual model adds the target side on top
    n = {k: v["params"] for k, v in res["configs"].items()}
    assert n["maruf5_base"] < n["maruf5_src_lsa"] < n["maruf5_dual"]
    p = run([sys.executable, SPEED, "--data", binp.parent, "--configs", "maruf5_tgt", "--rounds", "1",
             "--steps", "1", "--out", tmp_path / "j"], check=False)
    assert p.returncode != 0 and "maruf5_tgt" in p.stderr and "--baseline maruf5_base" in p.stderr


def test_speed_memory_network_configurations_read_the_generated_target_context(tiny_bin, tmp_path):
    """Maruf ch. 3's cost ratio: the memory network vs its RNN sentence model on the same chapter batches, which
    carry the generated target context (here the segmented references stand in for stage 1's translations)."""
    import shutil

    gen = tmp_path / "generated"
    gen.mkdir()
    shutil.copyfile(tiny_bin.parent / "seg" / "train.en", gen / "train.en")
    out = tmp_path / "maruf3"
    common = [sys.executable, SPEED, "--data", tiny_bin.parent, "--baseline", "maruf3_sentence", "--rounds", "2",
              "--steps", "1", "--warmup", "1", "--max-tokens", "2048"]
    run([*common, "--configs", "maruf3_m2c_both", "--doc-generated-dir", gen, "--out", out])
    res = json.loads((out / "speed.json").read_text())
    assert list(res["configs"]) == ["maruf3_sentence", "maruf3_m2c_both"]
    assert res["configs"]["maruf3_sentence"]["ratios"] == [1.0, 1.0]
    assert all(s > 0 for s in res["configs"]["maruf3_m2c_both"]["seconds"])
    # the document RNN, the memory readers and the extra decoder inputs add parameters
    assert res["configs"]["maruf3_m2c_both"]["params"] > res["configs"]["maruf3_sentence"]["params"]
    p = run([*common, "--configs", "maruf3_m2c_both", "--out", tmp_path / "j"], check=False)
    assert p.returncode != 0 and "'maruf3_m2c_both' reads the generated target context" in p.stderr


DECODE_SPEED = ROOT / "recipes" / "bench" / "decode_speed.py"


def test_decode_speed_interleaved_ratios(tiny_bin, tmp_path):
    from harness import USER_DIR, train
    ckpt = train(tiny_bin, tmp_path / "m", max_update=2)
    common = f"{tiny_bin} --user-dir {USER_DIR} --task translation_ext --path {ckpt} --cpu --max-len-b 20"
    out = tmp_path / "decode.json"
    p = run([sys.executable, DECODE_SPEED, "--rounds", "2", "--out", out,
             "--system", f"greedy={common} --beam 1", "--system", f"beam4={common} --beam 4"])
    res = json.loads(out.read_text())
    assert list(res["summary"]) == ["greedy", "beam4"]  # the baseline first, as given
    assert res["summary"]["greedy"]["ratio_median"] == 1.0
    assert len(res["runs"]["beam4"]) == 2 and all(r["seconds"] > 0 for r in res["runs"]["beam4"])
    assert res["summary"]["beam4"]["sentences"] == res["summary"]["greedy"]["sentences"] > 0
    assert "| beam4 |" in p.stdout
    # systems that translate different sets are refused
    p = run([sys.executable, DECODE_SPEED, "--rounds", "1", "--system", f"test={common} --beam 1",
             "--system", f"valid={common} --beam 1 --gen-subset valid"], check=False)
    assert p.returncode != 0 and "different numbers of sentences" in p.stderr


def test_recipe_decode_speed_stage_writes_json_only_when_complete(tiny_bin, tmp_path):
    """recipes/lib.sh's ``decode_speed PREFIX --system ...`` (the decode-time stage of every recipe): PREFIX.md and
    PREFIX.json after every round; a failing stage stops the recipe with one error naming PREFIX.md and leaves no
    PREFIX.json, so the recipe's rerun redoes the stage instead of skipping it."""
    from harness import USER_DIR, train
    ckpt = train(tiny_bin, tmp_path / "m", max_update=2)
    common = f"{tiny_bin} --user-dir {USER_DIR} --task translation_ext --path {ckpt} --cpu --max-len-b 20"
    stage = 'source recipes/lib.sh; ROUNDS=1; decode_speed "$1" --system "$2" --system "$3"; echo "stage done"'
    ok = tmp_path / "ok"
    p = run(["bash", "-c", stage, "x", ok, f"greedy={common} --beam 1", f"beam2={common} --beam 2"])
    assert "stage done" in p.stdout
    assert list(json.loads((ok.parent / "ok.json").read_text())["summary"]) == ["greedy", "beam2"]
    assert "| beam2 |" in (ok.parent / "ok.md").read_text() and not (ok.parent / "ok.json.tmp").exists()
    bad = tmp_path / "bad"
    p = run(["bash", "-c", stage, "x", bad, f"greedy={common} --beam 1", f"broken={common} --path {tmp_path}/none.pt"],
            check=False)
    assert p.returncode != 0 and "stage done" not in p.stdout
    assert f"the decode-time stage failed ({bad}.md" in p.stderr
    assert not (tmp_path / "bad.json").exists()


def test_deep_shallow_configuration_moves_the_layers():
    """transformer_6_1 is the baseline with 6 encoder and 1 decoder layers (Kasai et al. 2021), nothing else
    changed; its non-embedding parameters are within 5% of the baseline's (the 6+1 vs 3+3 tables)."""
    import fairseq_ext  # noqa: F401
    from fairseq_ext.tools.evaluation import bench_configs as configs
    from fairseq.models.transformer import TransformerModel

    base, ds = configs.CONFIGS["transformer"]["train"], configs.CONFIGS["transformer_6_1"]["train"]
    diff = [(i, a, b) for i, (a, b) in enumerate(zip(base, ds)) if a != b]
    assert len(base) == len(ds) and [(base[i - 1], a, b) for i, a, b in diff] == [
        ("--encoder-layers", "3", "6"), ("--decoder-layers", "3", "1")]
    task = toy_task(100)
    counts = {}
    for name, flags in (("base", base), ("ds", ds)):
        # the config's own task (translation_ext: it carries --cpu-bf16/--math-attention on a bf16 CPU)
        task_name = configs.CONFIGS["transformer"]["task"]
        args = train_parse("x", "--task", task_name, *flags)
        m = TransformerModel.build_model(args, task)
        assert (len(m.encoder.layers), len(m.decoder.layers)) == ((3, 3) if name == "base" else (6, 1))
        counts[name] = sum(p.numel() for p in m.parameters()) - m.encoder.embed_tokens.weight.numel()
    assert 1.0 < counts["ds"] / counts["base"] < 1.05
