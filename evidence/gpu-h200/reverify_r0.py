"""One-off: re-run the fixed mode check and the acceptance truth on block r0 of the H200 run."""
import json, sys
from pathlib import Path
from speclib.core.params import recorded_params
from speclib.core.prometheus import parse_prometheus, spec_counters_delta
from speclib.core.records import read_records
from speclib.demo.synthetic import SyntheticRecipe, chain_maps, declared_acceptance, expected_acceptance
from speclib.run.observe import verify_mode

run = Path(sys.argv[1])
params = recorded_params(run / "params.resolved.json") if (run / "params.resolved.json").exists() else None
records = list(read_records(run / "requests.jsonl"))
_, draft_next = chain_maps(SyntheticRecipe(preset="qwen3-4b", agreement=0.7))
for f in sorted((run / "launches").glob("*/status.json")):
    s = json.loads(f.read_text())
    series = params.series_by_name(s["series"])
    recs = [r for r in records if r.launch_id == s["launch_id"] and r.phase == "measure"]
    lf = f.parent
    delta = spec_counters_delta(parse_prometheus((lf / "metrics_before.prom").read_text()), parse_prometheus((lf / "metrics_after.prom").read_text()))
    flag = "--per-request-spec-decode-metrics" in (s.get("command") or [])
    mode = verify_mode(series, spec_delta=delta, records=recs, log_text=(lf / "server.log").read_text(), per_request_flag=flag)
    s["mode_check"] = mode
    if mode["ok"] and s["error"] and s["error"].startswith("mode check failed"):
        s["ok"], s["error"], s["error_cause"] = True, None, None
    spec = series.speculative_config or {}
    if spec.get("method") == "draft_model":
        k = spec["num_speculative_tokens"]
        outs = [r.token_ids for r in recs if r.ok and r.token_ids]
        s.setdefault("extra", {})["acceptance_truth"] = {"k": k, "agreement": 0.699234386025072, "declared": declared_acceptance(0.699234386025072, k), "expected": expected_acceptance(draft_next, outs, k), "n_requests": len(outs)}
    f.write_text(json.dumps(s, indent=1))
    print(s["series"], mode["ok"], mode["problems"], delta.num_drafts if delta else None)
