"""The Grafana dashboard (dashboard/grafana/dstrain-dashboard.json) and the
example Prometheus config next to it: valid shape, every PromQL expression
names only metrics dstrain exports, and the PromQL and the scrape config pass
promtool when it is installed. Standard library and pytest only."""

import json
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "dashboard" / "grafana"
DASHBOARD = GRAFANA / "dstrain-dashboard.json"
PROMETHEUS_YML = GRAFANA / "prometheus.yml"
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if pathlib.Path("/usr/bin/promtool").exists() else None)

# What metrics/registry.cc exports (labels job, rank, dp_rank, tp_rank, pp_rank on all).
COUNTERS = {
    "dstrain_steps_total", "dstrain_samples_total", "dstrain_tokens_total",
    "dstrain_skipped_steps_total", "dstrain_timer_seconds_total",
    "dstrain_comm_operations_total", "dstrain_comm_bytes_total", "dstrain_comm_seconds_total",
}
GAUGES = {
    "dstrain_loss", "dstrain_learning_rate", "dstrain_grad_norm", "dstrain_loss_scale",
    "dstrain_step_time_seconds", "dstrain_tokens_per_second", "dstrain_samples_per_second",
    "dstrain_mfu_ratio", "dstrain_achieved_flops_per_second", "dstrain_timer_seconds",
    "dstrain_comm_bus_bandwidth_bytes_per_second", "dstrain_memory_bytes",
    "dstrain_memory_peak_bytes", "dstrain_process_resident_memory_bytes", "dstrain_world_size",
    "dstrain_last_step_timestamp_seconds",
}
METRICS = COUNTERS | GAUGES
LABELS = {"job", "rank", "dp_rank", "tp_rank", "pp_rank", "timer", "op", "category"}

# PromQL functions and aggregations the dashboard may call, and its keywords.
FUNCTIONS = {
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "time", "timestamp", "abs",
    "clamp_min", "clamp_max", "avg_over_time", "max_over_time", "min_over_time",
    "sum_over_time", "last_over_time", "changes", "resets", "histogram_quantile",
    "label_replace", "vector", "scalar", "absent", "sort", "sort_desc", "round",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset"}


def load():
    with DASHBOARD.open() as f:
        return json.load(f)


def all_panels(dashboard):
    """Every panel, rows' nested panels included."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def data_panels(dashboard):
    return [p for p in all_panels(dashboard) if p.get("type") != "row"]


def exprs(dashboard):
    return [(p["title"], t["expr"]) for p in data_panels(dashboard) for t in p["targets"]]


def metric_names(expr):
    """The metric names an expression selects; raises on an unknown bare word."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        following = text[match.end():].lstrip()
        if following.startswith("("):
            assert word in FUNCTIONS, f"unknown PromQL function {word!r} in {expr!r}"
        elif word in KEYWORDS:
            continue
        elif re.fullmatch(r"\d+[smhdwy]?|e\d*", word):
            continue
        else:
            names.add(word)
    return names


def test_metric_name_parser_finds_names_and_rejects_unknown_words():
    assert metric_names('sum by (op) (rate(dstrain_comm_bytes_total{job=~"$job"}[1m]))') == {
        "dstrain_comm_bytes_total"}
    assert metric_names("time() - max(dstrain_last_step_timestamp_seconds)") == {
        "dstrain_last_step_timestamp_seconds"}
    assert metric_names("a_metric + dstrain_loss") == {"a_metric", "dstrain_loss"}
    with pytest.raises(AssertionError):
        metric_names("frobnicate(dstrain_loss)")


def test_dashboard_has_grafana_shape():
    d = load()
    assert isinstance(d["title"], str) and d["title"]
    assert isinstance(d["uid"], str) and 0 < len(d["uid"]) <= 40
    assert isinstance(d["schemaVersion"], int) and 36 <= d["schemaVersion"] <= 41
    assert d.get("id") is None, "an exported dashboard carries no database id"
    assert {"from", "to"} <= set(d["time"])
    assert [i["name"] for i in d["__inputs"]] == ["DS_PROMETHEUS"]
    assert d["__inputs"][0]["pluginId"] == "prometheus"

    panels = data_panels(d)
    assert len(panels) >= 10
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels:
        where = f"panel {p.get('title')!r}"
        assert p["type"] in {"timeseries", "stat", "gauge", "bargauge", "table"}, where
        assert p["title"], where
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("x", "y", "w", "h")), where
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, where
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, where
        assert p["targets"], f"{where} has no queries"
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for t in p["targets"]:
            assert isinstance(t["expr"], str) and t["expr"].strip(), where
            assert t.get("datasource", p["datasource"])["uid"] == "${DS_PROMETHEUS}", where
        assert "defaults" in p["fieldConfig"], where


def test_template_variables_job_and_rank_come_from_label_values():
    d = load()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("job", "rank"):
        v = variables[name]
        assert v["type"] == "query"
        query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
        assert m and m.group(2) == name, query
        assert metric_names(m.group(1)) <= METRICS, query
    assert variables["rank"]["multi"] and variables["rank"]["includeAll"]


def test_every_expression_uses_only_exported_metrics_and_labels():
    d = load()
    used = set()
    for title, expr in exprs(d):
        names = metric_names(expr)
        assert names, f"{title}: {expr!r} selects no metric"
        unknown = names - METRICS
        assert not unknown, f"{title}: {expr!r} uses unknown metrics {sorted(unknown)}"
        used |= names
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr):
            assert label in LABELS, f"{title}: unknown label {label!r} in {expr!r}"
        for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            for label in filter(None, (s.strip() for s in clause.split(","))):
                assert label in LABELS, f"{title}: unknown label {label!r} in {expr!r}"
    missing = METRICS - used
    assert not missing, f"metrics no panel shows: {sorted(missing)}"


def test_panels_the_dashboard_promises():
    titles = " | ".join(p["title"].lower() for p in data_panels(load()))
    for word in ("loss", "learning rate", "tokens/s", "mfu", "breakdown", "communication volume",
                 "bus bandwidth", "memory by category", "rss", "skipped"):
        assert word in titles, f"no panel about {word!r} (have: {titles})"


def test_counter_rates_use_a_range_and_timers_are_stacked():
    d = load()
    for title, expr in exprs(d):
        for fn in ("rate", "increase"):
            for m in re.finditer(rf"\b{fn}\((.*?)\)", expr):
                assert re.search(r"\[\d+[smh]\]", m.group(1)), f"{title}: {fn} without a range: {expr}"
                assert metric_names(m.group(1)) <= COUNTERS, f"{title}: {fn} of a gauge: {expr}"
    breakdown = [p for p in data_panels(d) if "breakdown" in p["title"].lower()]
    assert breakdown and breakdown[0]["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"


def test_metric_list_matches_the_registry_source():
    registry = ROOT / "metrics" / "registry.cc"
    if not registry.exists():
        pytest.skip("metrics/registry.cc is not there")
    text = registry.read_text()
    missing = sorted(m for m in METRICS if f'"{m}"' not in text)
    assert not missing, f"metrics/registry.cc does not define {missing}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
def test_every_expression_is_valid_promql(tmp_path):
    # Each expression as a recording rule; JSON is YAML, so no YAML library is needed.
    rules = {"groups": [{"name": "dstrain_dashboard", "rules": [
        {"record": f"dstrain:dashboard_expr_{i}", "expr": expr}
        for i, (_, expr) in enumerate(exprs(load()))]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
def test_prometheus_example_config_is_valid():
    result = subprocess.run([PROMTOOL, "check", "config", str(PROMETHEUS_YML)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_example_config_scrapes_ranks_every_5s():
    text = PROMETHEUS_YML.read_text()
    assert re.search(r"^\s*scrape_interval:\s*5s\s*$", text, re.M)
    assert re.search(r"^\s*honor_labels:\s*true\s*$", text, re.M)
    ports = [int(p) for p in re.findall(r"^\s*-\s*[\w.-]+:(\d+)\s*$", text, re.M)]
    assert ports and min(ports) == 9400, ports
