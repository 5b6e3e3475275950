Mas ahora los más mozos de días que yo, se ríen de mí; cuyos padres yo desdeñara ponerlos con los perros de mi ganado.
Porque ¿para qué yo habría menester la fuerza de sus manos, en los cuales había perecido con el tiempo?
Por causa de la pobreza y del hambre andaban solos; huían á la soledad, á lugar tenebroso, asolado y desierto.
Que cogían malvas entre los arbustos, y raíces de enebro para calentarse.
Eran echados de entre las gentes, y todos les daban grita como al ladrón.
Habitaban en las barrancas de los arroyos, en las cavernas de la tierra, y en las rocas.
Bramaban entre las matas, y se reunían debajo de las espinas.
Hijos de viles, y hombres sin nombre, más bajos que la misma tierra.
Y ahora yo soy su canción, y he sido hecho su refrán.
Abomínanme, aléjanse de mí, y aun de mi rostro no detuvieron su saliva.
Porque Dios desató mi cuerda, y me afligió, por eso se desenfrenaron delante de mi rostro.
A la mano derecha se levantaron los jóvenes; empujaron mis pies, y sentaron contra mí las vías de su ruina.
Mi senda desbarataron, aprovecháronse de mi quebrantamiento, contra los cuales no hubo ayudador.
Vinieron como por portillo ancho, revolviéronse á mi calamidad.
Hanse revuelto turbaciones sobre mí; combatieron como viento mi alma, y mi salud pasó como nube.
Y ahora mi alma está derramada en mí; días de aflicción me han aprehendido.
De noche taladra sobre mí mis huesos, y mis pulsos no reposan.
Con la grande copia de materia mi vestidura está demudada; cíñeme como el cuello de mi túnica.
Derribóme en el lodo, y soy semejante al polvo y á la ceniza.
Clamo á ti, y no me oyes; preséntome, y no me atiendes.
Haste tornado cruel para mí: con la fortaleza de tu mano me amenazas.
Levantásteme, é hicísteme cabalgar sobre el viento, y disolviste mi sustancia.
Porque yo conozco que me reduces á la muerte; y á la casa determinada á todo viviente.
Mas él no extenderá la mano contra el sepulcro; ¿clamarán los sepultados cuando él los quebrantare?
¿No lloré yo al afligido? Y mi alma ¿no se entristeció sobre el menesteroso?
Cuando esperaba yo el bien, entonces vino el mal; y cuando esperaba luz, la oscuridad vino.
Mis entrañas hierven, y no reposan; días de aflicción me han sobrecogido.
Denegrido ando, y no por el sol: levantádome he en la congregación, y clamado.
He venido á ser hermano de los dragones, y compañero de los buhos.
Mi piel está denegrida sobre mí, y mis huesos se secaron con ardentía.
Y hase tornado mi arpa en luto, y mi órgano en voz de lamentadores.
Salmo de David, cuando mudó su semblante delante de Abimelech, y él lo echó, y fuése. Bendeciré á Jehová en todo tiempo; su alabanza serásiempre en mi boca.
En Jehová se gloriará mi alma: oiránlo los mansos, y se alegrarán.
Engrandeced á Jehová conmigo, y ensalcemos su nombre á una.
Busqué á Jehová, y él me oyó, y libróme de todos mis temores.
A él miraron y fueron alumbrados: y sus rostros no se avergonzaron.
Este pobre clamó, y oyóle Jehová, y librólo de todas sus angustias.
El ángel de Jehová acampa en derredor de los que le temen, y los defiende.
Gustad, y ved que es bueno Jehová: dichoso el hombre que confiará en él.
Temed á Jehová, vosotros sus santos; porque no hay falta para los que le temen.
Los leoncillos necesitaron, y tuvieron hambre; pero los que buscan á Jehová, no tendrán falta de ningún bien.
Venid, hijos, oidme; el temor de Jehová os enseñaré.
¿Quién es el hombre que desea vida, que codicia días para ver bien?
Guarda tu lengua de mal, y tus labios de hablar engaño.
Apártate del mal, y haz el bien; busca la paz, y síguela.
Los ojos de Jehová están sobre los justos, y atentos sus oídos al clamor de ellos.
La ira de Jehová contra los que mal hacen, para cortar de la tierra la memoria de ellos.
Clamaron los justos, y Jehová oyó, y librólos de todas sus angustias.
Cercano está Jehová á los quebrantados de corazón; y salvará á los contritos de espíritu.
Muchos son los males del justo; mas de todos ellos lo librará Jehová.
El guarda todos sus huesos; ni uno de ellos será quebrantado.
Matará al malo la maldad; y los que aborrecen al justo serán asolados.
Jehová redime el alma de sus siervos; y no serán asolados cuantos en él confían.
Al Músico principal: sobre Neginoth: Salmo de David. Oye, oh Dios, mi clamor; á mi oración atiende.
Desde el cabo de la tierra clamaré á ti, cuando mi corazón desmayare: á la peña más alta que yo me conduzcas.
Porque tú has sido mi refugio, y torre de fortaleza delante del enemigo.
Yo habitaré en tu tabernáculo para siempre: estaré seguro bajo la cubierta de tus alas.
Porque tú, oh Dios, has oído mis votos, has dado heredad á los que temen tu nombre.
Días sobre días añadirás al rey: sus años serán como generación y generación.
Estará para siempre delante de Dios: misericordia y verdad prepara que lo conserven.
Así cantaré tu nombre para siempre, pagando mis votos cada día.
Al Músico principal: en Neginoth: Salmo: Cántico. Dios tenga misericordia de nosotros, y nos bendiga; haga resplandecer su rostro sobre nosotros (Selah);
Para que sea conocido en la tierra tu camino, en todas las gentes tu salud.
Alábente los pueblos, oh Dios; alábente los pueblos todos.
Alégrense y gócense las gentes; porque juzgarás los pueblos con equidad, y pastorearás las naciones en la tierra. (Selah.)
Alábente los pueblos, oh Dios: todos los pueblos te alaben.
La tierra dará su fruto: nos bendecirá Dios, el Dios nuestro.
Bendíganos Dios, y témanlo todos los fines de la tierra.
Canción: Salmo para los hijos de Coré: al Músico principal: para cantar sobre Mahalath: Masquil de Hemán Ezrahita. Oh Jehová, Dios de mi salud, día y noche clamo delante de ti.
Entre mi oración en tu presencia: inclina tu oído á mi clamor.
Porque mi alma está harta de males, y mi vida cercana al sepulcro.
Soy contado con los que descienden al hoyo, soy como hombre sin fuerza:
Libre entre los muertos, como los matados que yacen en el sepulcro, que no te acuerdas más de ellos, y que son cortados de tu mano.
Hasme puesto en el hoyo profundo, en tinieblas, en honduras.
Sobre mí se ha acostado tu ira, y me has afligido con todas tus ondas. (Selah.)
Has alejado de mí mis conocidos: hasme puesto por abominación á ellos: encerrado estoy, y no puedo salir.
Mis ojos enfermaron á causa de mi aflicción: hete llamado, oh Jehová, cada día; he extendido á ti mis manos.
¿Harás tú milagro á los muertos? ¿levantaránse los muertos para alabarte? (Selah.)
¿Será contada en el sepulcro tu misericordia, ó tu verdad en la perdición?
¿Será conocida en las tinieblas tu maravilla, ni tu justicia en la tierra del olvido?
Mas yo á ti he clamado, oh Jehová; y de mañana mi oración te previno.
¿Por qué, oh Jehová, desechas mi alma? ¿por qué escondes de mí tu rostro?
Yo soy afligido y menesteroso: desde la mocedad he llevado tus terrores, he estado medroso.
Sobre mí han pasado tus iras; tus espantos me han cortado.
Hanme rodeado como aguas de continuo; hanme cercado á una.
Has alejado de mí el amigo y el compañero; y mis conocidos se esconden en la tiniebla.
Jehová reinó: regocíjese la tierra: alégrense las muchas islas.
Nube y oscuridad alrededor de él: justicia y juicio son el asiento de su trono.
Fuego irá delante de él, y abrasará en derredor sus enemigos.
Sus relámpagos alumbraron el mundo: la tierra vió, y estremecióse.
Los montes se derritieron como cera delante de Jehová, delante del Señor de toda la tierra.
Los cielos denunciaron su justicia, y todos los pueblos vieron su gloria.
Avergüéncense todos los que sirven á las imágenes de talla, los que se alaban de los ídolos: los dioses todos á él se encorven.
Oyó Sión, y alegróse; y las hijas de Judá, oh Jehová, se gozaron por tus juicios.
Porque tú, Jehová, eres alto sobre toda la tierra: eres muy ensalzado sobre todos los dioses.
Los que á Jehová amáis, aborreced el mal: guarda él las almas de sus santos; de mano de los impíos los libra.
Luz está sembrada para el justo, y alegría para los rectos de corazón.
Alegraos, justos, en Jehová: y alabad la memoria de su santidad.
Aleluya. Alabad á Jehová desde los cielos: alabadle en las alturas.
Alabadle, vosotros todos sus ángeles: alabadle, vosotros todos sus ejércitos.
Alabadle, sol y luna: alabadle, vosotras todas, lucientes estrellas.
Alabadle, cielos de los cielos, y las aguas que están sobre los cielos.
Alaben el nombre de Jehová; porque él mandó, y fueron criadas.
Y las hizo ser para siempre por los siglos; púsolesley que no será quebrantada.
Alabad á Jehová, de la tierra los dragones y todos los abismos;
El fuego y el granizo, la nieve y el vapor, el viento de tempestad que ejecuta su palabra;
Los montes y todos los collados; el árbol de fruto, y todos los cedros;
La bestia y todo animal; reptiles y volátiles;
Los reyes de la tierra y todos los pueblos; los príncipes y todos los jueces de la tierra;
Los mancebos y también las doncellas; los viejos y los niños,
Alaben el nombre de Jehová, porque sólo su nombre es elevado; su gloria es sobre tierra y cielos.
El ensalzó el cuerno de su pueblo; alábenletodos sus santos, los hijos de Israel, el pueblo á él cercano. Aleluya.
Como los repartimientos de las aguas, así está el corazón del rey en la mano de Jehová: á todo lo que quiere lo inclina.
Todo camino del hombre es recto en su opinión: mas Jehová pesa los corazones.
Hacer justicia y juicio es á Jehová más agradable que sacrificio.
Altivez de ojos, y orgullo de corazón, y el brillo de los impíos, son pecado.
Los pensamientos del solícito ciertamente van á abundancia; mas todo presuroso, indefectiblemente á pobreza.
Allegar tesoros con lengua de mentira, es vanidad desatentada de aquellos que buscan la muerte.
La rapiña de los impíos los destruirá; por cuanto no quisieron hacer juicio.
El camino del hombre perverso es torcido y extraño: mas la obra del limpio es recta.
Mejor es vivir en un rincón de zaquizamí, que con la mujer rencillosa en espaciosa casa.
El alma del impío desea mal: su prójimo no le parece bien.
Cuando el escarnecedor es castigado, el simple se hace sabio; y cuando se amonestare al sabio, aprenderá ciencia.
Considera el justo la casa del impío: cómo los impíos son trastornados por el mal.
El que cierra su oído al clamor del pobre, también él clamará, y no será oído.
El presente en secreto amansa el furor, y el don en el seno, la fuerte ira.
Alegría es al justo hacer juicio; mas quebrantamiento á los que hacen iniquidad.
El hombre que se extravía del camino de la sabiduría, vendrá á parar en la compañía de los muertos.
Hombre necesitado será el que ama el deleite: y el que ama el vino y ungüentos no enriquecerá.
El rescate del justo es el impío, y por los rectos el prevaricador.
Mejor es morar en tierra del desierto, que con la mujer rencillosa é iracunda.
Tesoro codiciable y pingüe hay en la casa del sabio; mas el hombre insensato lo disipará.
El que sigue la justicia y la misericordia, hallará la vida, la justicia, y la honra.
La ciudad de los fuertes tomó el sabio, y derribó la fuerza en que ella confiaba.
El que guarda su boca y su lengua, su alma guarda de angustias.
Soberbio y presuntuoso escarnecedor es el nombre del que obra con orgullosa saña.
El deseo del perezoso le mata, porque sus manos no quieren trabajar.
Hay quien todo el día codicia: mas el justo da, y no desperdicia.
El sacrificio de los impíos es abominación: ¡cuánto más ofreciéndolo con maldad!
El testigo mentiroso perecerá: mas el hombre que oye, permanecerá en su dicho.
El hombre impío afirma su rostro: mas el recto ordena sus caminos.
No hay sabiduría, ni inteligencia, ni consejo, contra Jehová.
El caballo se apareja para el día de la batalla: mas de Jehová es el salvar.
Yo soy el hombre que ha visto aflicción en la vara de su enojo.
Guióme y llevóme en tinieblas, mas no en luz.
Ciertamente contra mí volvió y revolvió su mano todo el día.
Hizo envejecer mi carne y mi piel; quebrantó mis huesos.
Edificó contra mí, y cercóme de tósigo y de trabajo.
Asentóme en oscuridades, como los ya muertos de mucho tiempo.
Cercóme por todos lados, y no puedo salir; agravó mis grillos.
Aun cuando clamé y dí voces, cerro los oídos á mi oración.
Cercó mis caminos con piedra tajada, torció mis senderos.
Como oso que acecha fué para mí, como león en escondrijos.
Torció mis caminos, y depedazóme; tornóme asolado.
Su arco entesó, y púsome como blanco á la saeta.
Hizo entrar en mis riñones las saetas de su aljaba.
Fuí escarnio á todo mi pueblo, canción de ellos todos los días.
Hartóme de amarguras, embriagóme de ajenjos.
Quebróme los dientes con cascajo, cubrióme de ceniza.
Y mi alma se alejó de la paz, olvidéme del bien.
Y dije: Pereció mi fortaleza, y mi esperanza de Jehová.
Acuérdate de mi aflicción y de mi abatimiento, del ajenjo y de la hiel.
Tendrálo aún en memoria mi alma, porque en mí está humillada.
Esto reduciré á mi corazón, por lo cual esperaré.
Es por la misericordia de Jehová que no somos consumidos, porque nunca decayeron sus misericordias.
Nuevas son cada mañana; grande es tu fidelidad.
Mi parte es Jehová, dijo mi alma; por tanto en él esperaré.
Bueno es Jehová á los que en él esperan, al alma que le buscare.
Bueno es esperar callando en la salud de Jehová.
Bueno es al hombre, si llevare el yugo desde su mocedad.
Sentaráse solo, y callará, porque lo llevó sobre sí.
Pondrá su boca en el polvo, por si quizá hay esperanza.
Dará la mejilla al que le hiriere; hartaráse de afrenta.
Porque el Señor no desechará para siempre:
Antes si afligiere, también se compadecerá según la multitud de sus misericordias.
Porque no aflige ni congoja de su corazón á los hijos de los hombres.
Desmenuzar bajo de sus pies todos los encarcelados de la tierra,
Hacer apartar el derecho del hombre ante la presencia del Altísimo,
Trastornar al hombre en su causa, el Señor no lo sabe.
¿Quién será aquel que diga, que vino algo que el Señor no mandó?
¿De la boca del Altísimo no saldrá malo y bueno?
¿Por qué murmura el hombre viviente, el hombre en su pecado?
Escudriñemos nuestros caminos, y busquemos, y volvámonos á Jehová.
Levantemos nuestros corazones con las manos á Dios en los cielos.
Nosotros nos hemos rebelado, y fuimos desleales; tú no perdonaste.
Desplegaste la ira, y nos perseguiste; mataste, no perdonaste.
Te cubriste de nube, porque no pasase la oración nuestra.
Raedura y abominación nos tornaste en medio de los pueblos.
Todos nuestros enemigos abrieron sobre nosotros su boca.
Temor y lazo fué para nosotros, asolamiento y quebrantamiento.
Ríos de aguas echan mis ojos, por el quebrantamiento de la hija de mi pueblo.
Mis ojos destilan, y no cesan, porque no hay alivio,
Hasta que Jehová mire y vea desde los cielos.
Mis ojos contristaron mi alma, por todas las hijas de mi ciudad.
Mis enemigos me dieron caza como á ave, sin por qué.
Ataron mi vida en mazmorra, pusieron piedra sobre mí.
Aguas de avenida vinieron sobre mi cabeza; yo dije: Muerto soy.
Invoqué tu nombre, oh Jehová, desde la cárcel profunda.
Oiste mi voz; no escondas tu oído á mi clamor, para mi respiro.
Acercástete el día que te invoqué: dijiste: No temas.
Abogaste, Señor, la causa de mi alma; redimiste mi vida.
Tú has visto, oh Jehová, mi agravio; defiende mi causa.
Tú has visto toda su venganza; todos sus pensamientos contra mí.
Tú has oído el oprobio de ellos, oh Jehová, todas sus maquinaciones contra mí;
Los dichos de los que contra mí se levantaron, y su designio contra mí todo el día.
Su sentarse, y su levantarse mira: yo soy su canción.
Dales el pago, oh Jehová, según la obra de sus manos.
Dales ansia de corazón, tu maldición á ellos.
Persíguelos en tu furor, y quebrántalos de debajo de los cielos, oh Jehová.
