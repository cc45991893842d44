python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY' 2>&1 | tail -20
from rnncc.bench import Config, run_config, table
import json, os
rows=[run_config(Config("lstm","float16",512,64,packed=True),3,10)]
print(table(rows))
for r in rows: print(r["schedule"], r.get("speedup_graph"), r.get("rnncc_graph_error"), r["cudnn_graph_ms"], r["max_relative_error_vs_cudnn"])
json.dump(rows, open(os.environ["OUT"]+"/packed.json","w"), indent=1)
PY
