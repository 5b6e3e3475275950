Y Tornéme yo, y vi todas las violencias que se hacen debajo del sol: y he aquí las lágrimas de los oprimidos, y sin tener quien los consuele; y la fuerza estaba en la mano de sus opresores, y para ellos no había consolador.
Y alabé yo los finados que ya murieron, más que los vivientes que hasta ahora están vivos.
Y tuve por mejor que unos y otros al que no ha sido aún, que no ha visto las malas obras que debajo del sol se hacen.
Visto he asimismo que todo trabajo y toda excelencia de obras mueve la envidia del hombre contra su prójimo. También esto es vanidad y aflicción de espíritu.
El necio dobla sus manos y come su carne.
Mas vale el un puño lleno con descanso, que ambos puños llenos con trabajo y aflicción de espíritu.
Yo me torné otra vez, y vi vanidad debajo del sol.
Está un hombre solo y sin sucesor; que ni tiene hijo ni hermano; mas nunca cesa de trabajar, ni sus ojos se hartan de sus riquezas, ni se pregunta: ¿Para quién trabajo yo, y defraudo mi alma del bien? También esto es vanidad, y duro trabajo.
Mejores son dos que uno; porque tienen mejor paga de su trabajo.
Porque si cayeren, el uno levantará á su compañero: mas ¡ay del solo! que cuando cayere, no habrá segundo que lo levante.
También si dos durmieren juntos, se calentarán; mas ¿cómo se calentará uno solo?
Y si alguno prevaleciere contra el uno, dos estarán contra él; y cordón de tres dobleces no presto se rompe.
Mejor es el muchacho pobre y sabio, que el rey viejo y fatuo que no sabe ser aconsejado.
Porque de la cárcel salió para reinar; mientras el nacido en su reino se hizo pobre.
Vi todos los vivientes debajo del sol caminando con el muchacho sucesor, que estará en lugar de aquél.
No tiene fin todo el pueblo que fué antes de ellos: tampoco los que vendrán después estarán con él contentos. Y esto es también vanidad y aflicción de espíritu.
Las moscas muertas hacen heder ydar mal olor el perfume del perfumista: así una pequeña locura, al estimado por sabiduría y honra.
El corazón del sabio está á su mano derecha; mas el corazón del necio á su mano izquierda.
Y aun mientras va el necio por el camino, fáltalesu cordura, y dice á todos, que es necio.
Si el espíritu del príncipe se exaltare contra ti, no dejes tu lugar; porque la lenidad hará cesar grandes ofensas.
Hay un mal que debajo del sol he visto, á manera de error emanado del príncipe:
La necedad está colocada en grandes alturas, y los ricos están sentados en lugar bajo.
Vi siervos en caballos, y príncipes que andaban como siervos sobre la tierra.
El que hiciere el hoyo caerá en él; y el que aportillare el vallado, morderále la serpiente.
El que mudare las piedras, trabajo tendrá en ellas: el que cortare la leña, en ella peligrará.
Si se embotare el hierro, y su filo no fuere amolado, hay que añadir entonces más fuerza: empero excede la bondad de la sabiduría.
Muerde la serpiente cuando no está encantada, y el lenguaraz no es mejor.
Las palabras de la boca del sabio son gracia; mas los labios del necio causan su propia ruina.
El principio de las palabras de su boca es necedad; y el fin de su charla nocivo desvarío.
El necio multiplica palabras: no sabe hombre lo que ha de ser; ¿y quién le hará saber lo que después de él será?
El trabajo de los necios los fatiga; porque no saben por dónde ir á la ciudad.
¡Ay de ti, tierra, cuando tu rey es muchacho, y tus príncipes comen de mañana!
¡Bienaventurada, tú, tierra, cuando tu rey es hijo de nobles, y tus príncipes comen á su hora, por refección, y no por el beber!
Por la pereza se cae la techumbre, y por flojedad de manos se llueve la casa.
Por el placer se hace el convite, y el vino alegra los vivos: y el dinero responde á todo.
Ni aun en tu pensamiento digas mal del rey, ni en los secretos de tu cámara digas mal del rico; porque las aves del cielo llevarán la voz, y las que tienen alas harán saber la palabra.
