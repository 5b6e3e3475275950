Por tanto, si hay alguna consolación en Cristo; si algún refrigerio de amor; si alguna comunión del Espíritu; si algunas entrañas y misericordias,
Cumplid mi gozo; que sintáis lo mismo, teniendo el mismo amor, unánimes, sintiendo una misma cosa.
Nada hagáis por contienda ó por vanagloria; antes bien en humildad, estimándoos inferiores los unos á los otros:
No mirando cada uno á lo suyo propio, sino cada cual también á lo de los otros.
Haya, pues, en vosotros este sentir que hubo también en Cristo Jesús:
El cual, siendo en forma de Dios, no tuvo por usurpación ser igual á Dios:
Sin embargo, se anonadó á sí mismo, tomando forma de siervo, hecho semejante á los hombres;
Y hallado en la condición como hombre, se humilló á sí mismo, hecho obediente hasta la muerte, y muerte de cruz.
Por lo cual Dios también le ensalzó á lo sumo, y dióle un nombre que es sobre todo nombre;
Para que en el nombre de Jesús se doble toda rodilla de los que están en los cielos, y de los que en la tierra, y de los que debajo de la tierra;
Y toda lengua confiese que Jesucristo es el Señor, á la gloria de Dios Padre.
Por tanto, amados míos, como siempre habéis obedecido, no como en mi presencia solamente, sino mucho más ahora en mi ausencia, ocupaos en vuestra salvación con temor y temblor;
Porque Dios es el que en vosotros obra así el querer como el hacer, por su buena voluntad.
Haced todo sin murmuraciones y contiendas,
Para que seáis irreprensibles y sencillos, hijos de Dios sin culpa en medio de la nación maligna y perversa, entre los cuales resplandecéis como luminares en el mundo;
Reteniendo la palabra de vida para que yo pueda gloriarme en el día de Cristo, que no he corrido en vano, ni trabajado en vano.
Y aun si soy derramado en libación sobre el sacrificio y servicio de vuestra fe, me gozo y congratulo por todos vosotros.
Y asimismo gozaos también vosotros, y regocijaos conmigo.
Mas espero en el Señor Jesús enviaros presto á Timoteo, para que yo también esté de buen ánimo, entendido vuestro estado.
Porque á ninguno tengo tan unánime, y que con sincera afición esté solícito por vosotros.
Porque todos buscan lo suyo propio, no lo que es de Cristo Jesús.
Pero la experiencia de él habéis conocido, que como hijo á padre ha servido conmigo en el evangelio.
Así que á éste espero enviaros, luego que yo viere cómo van mis negocios;
Y confío en el Señor que yo también iré presto á vosotros.
Mas tuve por cosa necesaria enviaros á Epafrodito, mi hermano, y colaborador y compañero de milicia, y vuestro mensajero, y ministrador de mis necesidades;
Porque tenía gran deseo de ver á todos vosotros, y gravemente se angustió porque habíais oído que había enfermado.
Pues en verdad estuvo enfermo á la muerte: mas Dios tuvo misericordia de él; y no solamente de él, sino aun de mí, para que yo no tuviese tristeza sobre tristeza.
Así que le envío más presto, para que viéndole os volváis á gozar, y yo esté con menos tristeza.
Recibidle pues en el Señor con todo gozo; y tened en estima á los tales:
Porque por la obra de Cristo estuvo cercano á la muerte, poniendo su vida para suplir vuestra falta en mi servicio.
Empero tú, habla lo que conviene á la sana doctrina:
Que los viejos sean templados, graves, prudentes, sanos en la fe, en la caridad, en la paciencia.
Las viejas, asimismo, se distingan en un porte santo; no calumniadoras, no dadas á mucho vino, maestras de honestidad:
Que enseñen á las mujeres jóvenes á ser prudentes, á que amen á sus maridos, á que amen á sus hijos,
A ser templadas, castas, que tengan cuidado de la casa, buenas, sujetas á sus maridos; porque la palabra de Dios no sea blasfemada.
Exhorta asimismo á los mancebos á que sean comedidos;
Mostrándote en todo por ejemplo de buenas obras; en doctrina haciendo ver integridad, gravedad,
Palabra sana, é irreprensible; que el adversario se avergüence, no teniendo mal ninguno que decir de vosotros.
Exhorta á los siervos á que sean sujetos á sus señores, que agraden en todo, no respondones;
No defraudando, antes mostrando toda buena lealtad, para que adornen en todo la doctrina de nuestro Salvador Dios.
Porque la gracia de Dios que trae salvación á todos los hombres, se manifestó,
Enseñándonos que, renunciando á la impiedad y á los deseos mundanos, vivamos en este siglo templada, y justa, y píamente,
Esperando aquella esperanza bienaventurada, y la manifestación gloriosa del gran Dios y Salvador nuestro Jesucristo,
Que se dió á sí mismo por nosotros para redimirnos de toda iniquidad, y limpiar para sí un pueblo propio, celoso de buenas obras.
Esto habla y exhorta, y reprende con toda autoridad. Nadie te desprecie.
