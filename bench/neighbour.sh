#!/usr/bin/env bash
# A noisy neighbour on `make run` (docs/decisions/0261): tenant `dev` sends three 60,000-row
# imports and NOTES documents (default 12; NOTES=0 for the imports alone), then tenant `acme`
# one memo and one 20-row import; prints how long acme's two took. Every file is new each run
# (a repeat would be deduplicated). The baseline is the same script on the release before:
# `git checkout <rev> && make run`. Usage, with `make run` up in this checkout:
#   NOTES=0 bash bench/neighbour.sh
set -eu
cd "$(dirname "$0")/.."
API=${API:-http://127.0.0.1:8000}
T=$(cat .ingest/dev-token)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export RUN_TAG=$(date +%s%N) WORK NOTES=${NOTES:-12}
.venv/bin/ingest users create --tenant acme --email a@acme.test --role admin \
  --password 'acme-pass-123' >/dev/null 2>&1 || true
A=$(.venv/bin/ingest token --email a@acme.test --tenant acme | tail -1)
.venv/bin/python - <<'PY'
import os, pathlib
from tests.support import records
work, tag = pathlib.Path(os.environ["WORK"]), os.environ["RUN_TAG"]
for i in range(3):
    (work / f"big{i}.csv").write_bytes(records.judgments_csv(60000, seed=f"big{i}-{tag}"))
(work / "small.csv").write_bytes(records.judgments_csv(20, seed=f"acme-{tag}"))
for i in range(int(os.environ["NOTES"])):
    (work / f"dev-note-{i}.md").write_text(f"# Note {i} ({tag})\n\n" + "Dragonfly ingest note. " * 400)
(work / "acme-memo.md").write_text(f"# Acme memo\n\nThe acme team meets on Thursdays ({tag}).\n")
PY
since() { python3 -c "import time,sys;print(round(time.time()-float(sys.argv[1]),1))" "$1"; }
field() { python3 -c "import sys,json;print(json.load(sys.stdin).get('$1'))"; }
status_of() { curl -s -H "Authorization: Bearer $2" "$API/$1" | field status; }

echo "dev: 3 imports of 60,000 judgments and $NOTES documents"
for i in 0 1 2; do
  curl -s -H "Authorization: Bearer $T" -F contract=judgments -F file=@"$WORK/big$i.csv" \
    "$API/v1/imports" >/dev/null
done
for i in $(seq 0 $((NOTES - 1))); do
  curl -s -H "Authorization: Bearer $T" -F file=@"$WORK/dev-note-$i.md" "$API/v1/ingest" >/dev/null
done
sleep 2
echo "acme, meanwhile: one memo and one 20-row import"
t0=$(date +%s.%N)
doc=$(curl -s -H "Authorization: Bearer $A" -F file=@"$WORK/acme-memo.md" "$API/v1/ingest" | field run_id)
imp=$(curl -s -H "Authorization: Bearer $A" -F contract=judgments -F file=@"$WORK/small.csv" \
  "$API/v1/imports" | field batch_id)
d_done=""; i_done=""
for _ in $(seq 1 600); do
  if [ -z "$d_done" ]; then
    case $(status_of "v1/ingestion-runs/$doc" "$A") in
      succeeded|failed) d_done=$(since "$t0"); echo "acme memo: done after ${d_done} s";;
    esac
  fi
  if [ -z "$i_done" ]; then
    case $(status_of "intake/batches/$imp" "$A") in
      completed|partial|failed) i_done=$(since "$t0"); echo "acme import: done after ${i_done} s";;
    esac
  fi
  [ -n "$d_done" ] && [ -n "$i_done" ] && break
  sleep 1
done
