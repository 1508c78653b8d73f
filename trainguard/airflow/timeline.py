"""The pages of the Airflow plugin, as HTML with inline SVG: no JavaScript, no assets to serve.

:func:`jobs_page` lists the jobs of a run history; :func:`job_page` shows one job: a strip of
its lifetime with a mark at each round, then one row per round whose bar is split into the
round's stages (diagnose, decide, stop, isolate, restart), all rounds on one scale, so the slow
stage of a slow round stands out. Every string that comes from a job (commands, log evidence)
is escaped.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from trainguard.goodput import describe as describe_goodput

# One colour per stage, in the order stages happen; the screenshot test looks for these.
STAGE_COLOURS = {
    "diagnose": "#6366f1",
    "decide": "#0ea5e9",
    "stop": "#f97316",
    "isolate": "#a855f7",
    "restart": "#22c55e",
}
STATUS_COLOURS = {"succeeded": "#16a34a", "failed": "#dc2626", "running": "#2563eb"}
# Marks on the lifetime strip, one colour per action, none shared with a stage.
ACTION_COLOURS = {"fail": "#b91c1c", "restart_in_place": "#0d9488", "restart_instances": "#0891b2",
                  "restart_job": "#ca8a04", "reschedule_isolated": "#c026d3", "replace_instances": "#db2777",
                  "scale_in": "#475569"}

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#0f172a;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
a{color:#1d4ed8;text-decoration:none} a:hover{text-decoration:underline}
table{border-collapse:collapse;width:100%;font-size:13px} th,td{padding:6px 8px;text-align:left;
border-bottom:1px solid #e2e8f0;vertical-align:top} th{background:#f8fafc;font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600}
.muted{color:#64748b} code{font-size:12px;background:#f1f5f9;padding:1px 4px;border-radius:3px;
word-break:break-all} .legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border-radius:2px}
.failure{border-left:4px solid #dc2626;background:#fef2f2;padding:8px 12px;font-size:13px}
"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{body}</body></html>")


def _badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#64748b")
    return f"<span class=\"badge\" style=\"background:{colour}\">{escape(status)}</span>"


def _when(iso: str | None) -> str:
    return escape((iso or "").replace("T", " ").removesuffix("Z"))


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def jobs_page(reports: Sequence[Mapping[str, Any]], base: str, state_dir: str) -> str:
    """The list of jobs, newest first."""
    rows = []
    for report in sorted(reports, key=lambda r: r["created_at"], reverse=True):
        failure = report.get("failure") or {}
        link = f"{base}/jobs/{quote(report['job_id'], safe='')}"
        rows.append(
            f"<tr><td><a href=\"{escape(link)}\">{escape(report['job_id'])}</a></td>"
            f"<td>{_badge(report['status'])}</td><td><code>{escape(' '.join(report.get('command') or []))}</code></td>"
            f"<td>{report.get('nproc')}</td><td>{len(report['rounds'])}</td><td>{report['restarts']}</td>"
            f"<td>{escape(failure.get('error_code') or '')}</td><td>{_when(report['created_at'])}</td>"
            f"<td>{_when(report['updated_at'])}</td></tr>")
    table = ("<table><tr><th>job</th><th>status</th><th>command</th><th>ranks</th><th>rounds</th>"
             "<th>restarts</th><th>failure</th><th>started (UTC)</th><th>updated (UTC)</th></tr>"
             + "".join(rows) + "</table>") if rows else "<p class=\"muted\">No jobs recorded yet.</p>"
    return _page("trainguard jobs", f"<h1>Training jobs</h1><p class=\"muted\">Run history in "
                                    f"<code>{escape(state_dir)}</code></p>{table}")


def _lifetime_strip(report: Mapping[str, Any], width: int) -> str:
    """The job from start to last update, with a mark per round coloured by its action."""
    start, end = _seconds(report["created_at"]), _seconds(report["updated_at"])
    span = max(end - start, 1e-3)
    marks = []
    records = [*report["rounds"], *([report["failure"]] if report.get("failure") else [])]
    for record in records:
        x = 10 + (width - 20) * min(max((_seconds(record["started_at"]) - start) / span, 0.0), 1.0)
        colour = ACTION_COLOURS.get(record["action"], "#64748b")
        label = "fail" if record["action"] == "fail" else str(record["round"])
        marks.append(f"<line x1=\"{x:.1f}\" y1=\"14\" x2=\"{x:.1f}\" y2=\"40\" stroke=\"{colour}\" stroke-width=\"3\"/>"
                     f"<text x=\"{x:.1f}\" y=\"54\" font-size=\"11\" text-anchor=\"middle\">{escape(label)}</text>")
    return (f"<svg width=\"{width}\" height=\"60\" role=\"img\" aria-label=\"job lifetime\">"
            f"<rect x=\"10\" y=\"22\" width=\"{width - 20}\" height=\"10\" rx=\"5\" fill=\"#e2e8f0\"/>"
            f"<text x=\"10\" y=\"12\" font-size=\"11\" fill=\"#64748b\">{_when(report['created_at'])}</text>"
            f"<text x=\"{width - 10}\" y=\"12\" font-size=\"11\" fill=\"#64748b\" text-anchor=\"end\">"
            f"{_when(report['updated_at'])} ({span:.1f} s)</text>" + "".join(marks) + "</svg>")


def _round_rows(records: Sequence[Mapping[str, Any]], width: int) -> str:
    """One row per round: its label, then its stages as adjoining bars on a shared scale."""
    label_w, row_h, bar_w = 330, 30, width - 330 - 80
    longest = max((sum(r.get("stages", {}).values()) for r in records), default=0.0) or 1e-3
    rows = []
    for i, record in enumerate(records):
        y = i * row_h
        colour = ACTION_COLOURS.get(record["action"], "#64748b")
        title = f"round {record['round']}" if record["action"] != "fail" else "failure"
        rows.append(f"<text x=\"0\" y=\"{y + 19}\" font-size=\"12\"><tspan font-weight=\"600\">{escape(title)}"
                    f"</tspan> <tspan fill=\"{colour}\">{escape(record['action'])}</tspan> "
                    f"<tspan fill=\"#64748b\">{escape(record['error_code'])}</tspan></text>")
        x = float(label_w)
        stages = record.get("stages") or {}
        for stage, seconds in stages.items():
            # A stage of a few milliseconds still gets a visible sliver.
            w = max(bar_w * seconds / longest, 3.0)
            colour = STAGE_COLOURS.get(stage, "#94a3b8")
            rows.append(f"<rect x=\"{x:.1f}\" y=\"{y + 6}\" width=\"{w:.1f}\" height=\"18\" fill=\"{colour}\">"
                        f"<title>{escape(stage)}: {seconds:.3f} s</title></rect>")
            x += w
        rows.append(f"<text x=\"{x + 6:.1f}\" y=\"{y + 19}\" font-size=\"12\" fill=\"#334155\">"
                    f"{sum(stages.values()):.2f} s</text>")
    height = max(len(records), 1) * row_h
    return (f"<svg width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"rounds and their stages\">"
            + "".join(rows) + "</svg>")


def job_page(report: Mapping[str, Any], events: Sequence[Mapping[str, Any]], base: str, width: int = 1100) -> str:
    """One job: summary, lifetime strip, rounds with their stages, the round table, recent events."""
    failure = report.get("failure")
    records = [*report["rounds"], *([failure] if failure else [])]
    head = (f"<p><a href=\"{escape(base)}/\">&larr; all jobs</a></p><h1>{escape(report['job_id'])} "
            f"{_badge(report['status'])}</h1><p><code>{escape(' '.join(report.get('command') or []))}</code> "
            f"<span class=\"muted\">{report.get('nproc')} rank(s) on {report.get('nodes')} node(s); "
            f"{len(report['rounds'])} round(s), {report['restarts']} restart(s) of the budget</span></p>")
    if failure:
        head += (f"<div class=\"failure\"><b>{escape(failure['error_code'])}</b> "
                 f"({'transient' if failure.get('transient') else 'permanent'}): {escape(failure['reason'])}"
                 f"<br><span class=\"muted\">{escape(failure.get('error_message') or '')}</span></div>")
    if report.get("goodput"):
        head += f"<p>{escape(describe_goodput(report['goodput']))}</p>"
    head += _sanity_table(report.get("sanity_check"))
    legend = "<p class=\"legend\">" + "".join(
        f"<span><i style=\"background:{colour}\"></i>{stage}</span>" for stage, colour in STAGE_COLOURS.items()) + "</p>"
    timeline = (f"<h2>Timeline</h2>{_lifetime_strip(report, width)}<h2>Rounds by stage</h2>{legend}"
                f"{_round_rows(records, width)}") if records else "<p class=\"muted\">No faults: no rounds.</p>"
    table_rows = "".join(
        f"<tr><td>{escape(str(r['round']))}</td><td>{_when(r['started_at'])}</td><td>{escape(r['action'])}</td>"
        f"<td>{escape(r['error_code'])}</td><td>{escape(r['error_source'])}</td>"
        f"<td>{escape(' '.join(p for p in (r.get('node'), r.get('instance')) if p))}</td>"
        f"<td>{escape(r['reason'])}<br><span class=\"muted\">{escape(r.get('error_message') or '')}</span></td>"
        f"<td>{escape(r['result'])}</td></tr>" for r in records)
    table = ("<h2>Rounds</h2><table><tr><th>round</th><th>detected (UTC)</th><th>action</th><th>error code</th>"
             "<th>source</th><th>where</th><th>why</th><th>result</th></tr>" + table_rows + "</table>"
             ) if records else ""
    event_rows = "".join(
        f"<tr><td>{_when(e['at'])}</td><td>{escape(e['type'])}</td><td>{escape(e.get('message') or '')}</td></tr>"
        for e in events[-50:])
    recent = ("<h2>Recent events</h2><table><tr><th>at (UTC)</th><th>event</th><th>message</th></tr>"
              + event_rows + "</table>") if events else ""
    return _page(f"trainguard {report['job_id']}", head + timeline + table + recent)


def _sanity_table(check: Mapping[str, Any] | None) -> str:
    """The pre-start sanity check (seed 001): per item and node, the value against the peers."""
    if not check:
        return ""
    rows = "".join(
        f"<tr><td>{escape(item['item'])}</td><td>{escape(row['node'])}</td>"
        f"<td>{'-' if row['value'] is None else row['value']}</td>"
        f"<td>{'-' if row['peers_median'] is None else row['peers_median']}</td><td>{escape(item['unit'])}</td>"
        f"<td>{escape(row['verdict'])}</td></tr>" for item in check.get("items", []) for row in item["nodes"])
    verdict = "passed" if check.get("passed") else f"failed ({escape(str(check.get('fail_action')))})"
    return (f"<h2>Sanity check: {verdict}</h2><p class=\"muted\">{escape(check.get('reason') or '')}</p>"
            "<table><tr><th>item</th><th>node</th><th>value</th><th>peers' median</th><th>unit</th>"
            f"<th>verdict</th></tr>{rows}</table>")
