#!/bin/bash
# 10 alternated pairs: old (e061c5e, static temperature) and new (HEAD, traced), run -t 1 --K 4 --repeats 15
. /work/main/.venv/bin/activate
cd /tmp/tpairs
for i in $(seq 1 10); do
  for v in old new; do
    if [ $(( i % 2 )) -eq 0 ]; then [ $v = old ] && v2=new || v2=old; else v2=$v; fi
    if [ $v2 = old ]; then PP=/tmp/old; else PP=/work/main; fi
    (cd /tmp && PYTHONPATH=$PP python -m specbench run -t 1 --K 4 --repeats 15 --no-save --export-json /tmp/tpairs/$v2-$i.json >/tmp/tpairs/$v2-$i.log 2>&1)
  done
done
echo done > /tmp/tpairs/DONE
