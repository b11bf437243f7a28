"""``leaderboard.html``: the board as one static page a person looks at, rendered from the same rows as
``leaderboard.md`` (its text, turned into HTML) with a chart under each table: each row's value and test interval, a
colour per hardware, hollow marks for rows not ranked; the speed of each reference's work per machine as bars. One
self-contained file (no server, no network: its own styles and script, and a policy that loads nothing), with each
table's row details folded and a filter box. ``board_render.write_board`` writes it whole beside the .md pages."""
from __future__ import annotations

import html
import re

from recipe_zoo import board_render, board_rows
from recipe_zoo.board import PROTOCOL, group, interval, machine_free, protocol, row_name

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f")
RIGHT = ' class="r"'
ROW_PX, LABEL_PX, WIDTH_PX, LABEL_CHARS = 20, 400, 1060, 64
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1360px; padding: 0 16px 40px; color: #222; }
h1 { margin-top: 12px; } h2 { margin-top: 40px; border-top: 1px solid #ddd; padding-top: 12px; font-size: 1.2em; }
p { max-width: 110ch; } p.note { color: #555; font-size: 0.92em; margin: 4px 0; }
.wide { overflow-x: auto; } table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.r, th.r { text-align: right; } tbody tr:nth-child(even) { background: #fafafa; }
code { background: #f2f2f2; padding: 0 3px; border-radius: 3px; font-size: 0.95em; }
details { margin: 6px 0 10px; } details li { font-size: 12.5px; margin: 2px 0; } summary { cursor: pointer; }
#filter { position: sticky; top: 0; background: #fff; padding: 8px 0; border-bottom: 1px solid #ddd; z-index: 1; }
#filter input { width: 420px; font-size: 14px; padding: 4px 8px; } #shown { color: #555; margin-left: 10px; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 4px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } .hidden { display: none; }
"""
SCRIPT = """
(function () {
  var body = document.body, rows = document.querySelectorAll('tbody tr, g.f');
  function shown() {
    var q = document.getElementById('q').value.trim().toLowerCase(), count = 0;
    document.querySelectorAll('section').forEach(function (s) {
      var all = !q || s.dataset.f.indexOf(q) >= 0, any = all;
      s.querySelectorAll('tbody tr, g.f').forEach(function (r) {
        var on = all || (r.dataset.f || r.textContent.toLowerCase()).indexOf(q) >= 0;
        r.classList.toggle('hidden', !on);
        if (on) { any = true; if (r.tagName === 'TR') count++; }
      });
      s.classList.toggle('hidden', !any);
    });
    document.getElementById('shown').textContent = count + ' table rows shown';
  }
  document.getElementById('q').addEventListener('input', shown);
  shown();
  body.dataset.tables = document.querySelectorAll('table').length;
  body.dataset.charts = document.querySelectorAll('svg.chart').length;
  body.dataset.bars = document.querySelectorAll('svg.bars').length;
  body.dataset.rows = rows.length;
  body.dataset.errors = window.zooErrors;
  body.dataset.ready = 'yes';
})();
"""
CATCH = ("window.zooErrors = 0; window.addEventListener('error', function () { window.zooErrors++; "
         "if (document.body) document.body.dataset.errors = window.zooErrors; });")
POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def render_html(rows: list[dict], reported: list[dict], checks=(), speed=(), prints=(), items=(),
                transfer=(), *, text: str | None = None) -> str:
    """The page, deterministic for the same rows (as ``board_render.render``, whose text it shows: ``text`` where
    the caller has rendered it already)."""
    if text is None:
        text = board_render.render(rows, reported, checks, speed, prints, items, transfer)
    known = {line["id"]: line for line in items}
    tables = group([r for r in rows if protocol(r) >= PROTOCOL])
    colours = _colours([*(r["hardware"] for r in rows), *(r["hardware"] for r in speed)])
    charts = {}
    for key, table in tables.items():
        lines = board_rows.shown(table, prints, known)
        bars = board_render.latest_speed(key, speed) if machine_free(key[4]) else []
        charts[board_rows.title(key)] = (_value_chart(lines, colours), _speed_chart(bars, colours) if bars else "")
    body = "\n".join(_blocks(text.splitlines(), charts))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>Leaderboard · recipe zoo'
            f'</title>\n<style>{STYLE}</style>\n<script>{CATCH}</script>\n</head>\n<body>\n'
            f'<div id="filter"><input id="q" type="search" placeholder="filter: a recipe, benchmark, hardware, '
            f'commit..." aria-label="filter the tables"><span id="shown"></span></div>\n{body}\n'
            f"<script>{SCRIPT}</script>\n</body>\n</html>\n")


def _colours(hardware) -> dict[str, str]:
    names = sorted({board_rows.short_hardware(h) for h in hardware})
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _blocks(lines: list[str], charts: dict) -> list[str]:
    """The Markdown's blocks as HTML (headings, paragraphs, tables, the details lists), a ``<section>`` per ``##``
    heading, with the charts of that heading's table under its tables."""
    out, heading, i, ids, open_section = [], "", 0, {}, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            content = line[level:].strip()
            if open_section:
                out.append("</section>")
            open_section = level == 2
            heading = content if level == 2 else ""
            if open_section:
                out.append(f'<section data-f="{_attr(content.lower())}">')
            out.append(f'<h{level} id="{_slug(content, ids)}">{_inline(content)}</h{level}>')
        elif line.startswith("|"):
            block = _take(lines, i, lambda text: text.startswith("|"))
            i += len(block)
            out.append(_table(block))
            value, bars = charts.get(heading, ("", ""))
            out.append(value if block[0].startswith("| rank |") else bars if "| runs |" in block[0] else "")
            continue
        elif line.startswith("- "):
            block = _take(lines, i, lambda text: text.startswith("- "))
            i += len(block)
            out.append(_details(block))
            continue
        elif line.strip():
            note = line.startswith(("stale:", "† ", "MFU on ", "Not measured yet"))
            out.append(("<p class=\"note\">" if note else "<p>") + f"{_inline(line)}</p>")
        i += 1
    return out + (["</section>"] if open_section else [])


def _take(lines: list[str], start: int, keep) -> list[str]:
    end = start
    while end < len(lines) and keep(lines[end]):
        end += 1
    return lines[start:end]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().removeprefix("|").removesuffix("|").split(" | ")]


def _table(block: list[str]) -> str:
    head, rule, *body = block
    right = [cell.endswith(":") for cell in _cells(rule)]

    def row(cells, tag):
        return "<tr>" + "".join(f"<{tag}{RIGHT if right[j:j + 1] == [True] else ''}>{_inline(c)}</{tag}>"
                                for j, c in enumerate(cells)) + "</tr>"
    return ('<div class="wide"><table>\n<thead>' + row(_cells(head), "th") + "</thead>\n<tbody>\n"
            + "\n".join(row(_cells(line), "td") for line in body) + "\n</tbody></table></div>")


def _details(block: list[str]) -> str:
    items = "\n".join(f"<li>{_inline(line[2:])}</li>" for line in block)
    if not re.match(r"- r\d+: ", block[0]):
        return f"<ul>\n{items}\n</ul>"
    return (f"<details><summary>each row's command, commit, date, full hardware, configuration, cost and checks "
            f"({len(block)} row{'s' if len(block) > 1 else ''})</summary>\n<ul>\n{items}\n</ul></details>")


def _inline(text: str) -> str:
    """Markdown's inline marks on escaped text: `code` (nothing inside it read), **bold**, *italic*, [links](x)."""
    out = []
    for j, part in enumerate(text.split("`")):
        part = html.escape(part, quote=True)
        if j % 2:
            out.append(f"<code>{part}</code>")
            continue
        part = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<![\w*])\*([^*]+?)\*(?![\w*])", r"<em>\1</em>", part)
        out.append(re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', part))
    return "".join(out)


def _attr(text: str) -> str:
    return html.escape(text, quote=True)


def _slug(heading: str, ids: dict) -> str:
    """GitHub's anchor of a heading (lower case, punctuation dropped, spaces as hyphens), so links to the .md
    page's tables work here too."""
    slug = re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", heading.lower()))
    ids[slug] = ids.get(slug, -1) + 1
    return slug if not ids[slug] else f"{slug}-{ids[slug]}"


def _value_chart(lines: list, colours: dict) -> str:
    """Each row's mean (a dot: filled when ranked, hollow when stale) and its test interval (a line), a colour per
    hardware, on one axis; the best row's mean as a dashed line."""
    spans = [_span(line.row) for line in lines]
    low, high = min(lo for lo, _ in spans), max(hi for _, hi in spans)
    pad = (high - low) * 0.06 or abs(high) * 0.01 or 0.01
    low, high = low - pad, high + pad
    plot = WIDTH_PX - LABEL_PX - 24
    height = 34 + ROW_PX * len(lines) + 26

    def x(value):
        return LABEL_PX + plot * (value - low) / (high - low)
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
             f'viewBox="0 0 {WIDTH_PX} {height}" role="img" data-rows="{len(lines)}">',
             f'<rect x="{LABEL_PX}" y="24" width="{plot}" height="{ROW_PX * len(lines)}" fill="#fbfbfb" '
             f'stroke="#e3e3e3"/>']
    higher = lines[0].row["higher_is_better"]
    better = "higher is better →" if higher else "← lower is better"
    parts.append(f'<text x="{LABEL_PX}" y="15">{better}; dots: mean '
                 "over seeds (hollow: stale, not ranked); lines: test 95% (or two seed errors)</text>")
    for tick in _ticks(low, high):
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="24" y2="{24 + ROW_PX * len(lines)}" '
                     f'stroke="#e9e9e9"/><text x="{x(tick):.1f}" y="{height - 8}" text-anchor="middle">'
                     f"{tick:.6g}</text>")
    best = next((line.row for line in lines if line.rank != "stale"), None)
    if best is not None:
        parts.append(f'<line x1="{x(best["mean"]):.1f}" x2="{x(best["mean"]):.1f}" y1="24" '
                     f'y2="{24 + ROW_PX * len(lines)}" stroke="#999" stroke-dasharray="4 3"/>')
    for i, (line, (lo, hi)) in enumerate(zip(lines, spans)):
        r, y = line.row, 24 + ROW_PX * i + ROW_PX / 2
        hardware = board_rows.short_hardware(r["hardware"])
        colour, name = colours[hardware], board_rows.name(r)
        text = f"{line.ref} · {line.rank} · {name}"
        fill = colour if line.rank != "stale" else "#fff"
        tip = f"{text} · {board_render.value_text(r)} · {hardware} · {r.get('commit', '-')} {r.get('date', '')}"
        parts.append(f'<g class="f" data-f="{_attr((tip + " " + r["hardware"]).lower())}"><title>{_attr(tip)}'
                     f'</title><text x="{LABEL_PX - 8}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{_attr(_clip(text))}</text>"
                     f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
                     f'stroke-width="2"/><circle cx="{x(r["mean"]):.1f}" cy="{y:.1f}" r="4.5" fill="{fill}" '
                     f'stroke="{colour}" stroke-width="2"/></g>')
    parts.append("</svg>")
    return _legend({board_rows.short_hardware(line.row["hardware"]) for line in lines}, colours) + "".join(parts)


def _span(row: dict) -> tuple[float, float]:
    if row.get("ci_low") is not None and row.get("ci_high") is not None:
        return min(row["ci_low"], row["mean"]), max(row["ci_high"], row["mean"])
    return interval(row)


def _ticks(low: float, high: float) -> list[float]:
    """About five round values between low and high."""
    import math

    step = 10 ** math.floor(math.log10((high - low) / 5))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= 6:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [round(first + k * step, 12) for k in range(int((high - first) / step) + 1)]


def _speed_chart(rows: list[dict], colours: dict) -> str:
    """The speed table as bars: each (recipe, work, machine)'s median training seconds, a colour per hardware."""
    longest = max(r["train_seconds"] for r in rows) or 1.0
    plot, height = WIDTH_PX - LABEL_PX - 90, 12 + ROW_PX * len(rows) + 8
    parts = [f'<svg class="bars" xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}" '
             f'viewBox="0 0 {WIDTH_PX} {height}" role="img" data-rows="{len(rows)}">']
    for i, r in enumerate(rows):
        y, hardware = 12 + ROW_PX * i, board_rows.short_hardware(r["hardware"])
        width = max(1.0, plot * r["train_seconds"] / longest)
        text = f"{row_name(r)} · {hardware}"
        tip = f"{text} · {r['budget']} · {r['train_seconds']:.1f} s (median of {r['n']})"
        parts.append(f'<g class="f" data-f="{_attr(tip.lower())}"><title>{_attr(tip)}</title>'
                     f'<text x="{LABEL_PX - 8}" y="{y + 13}" text-anchor="end">'
                     f"{_attr(_clip(text))}</text>"
                     f'<rect x="{LABEL_PX}" y="{y + 3}" width="{width:.1f}" height="{ROW_PX - 6}" '
                     f'fill="{colours[hardware]}"/><text x="{LABEL_PX + width + 6:.1f}" y="{y + 13}">'
                     f"{r['train_seconds']:.1f} s</text></g>")
    parts.append("</svg>")
    return ('<p class="note">Training seconds (median) of the work on each machine:</p>'
            + _legend({board_rows.short_hardware(r["hardware"]) for r in rows}, colours) + "".join(parts))


def _clip(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _legend(hardware: set, colours: dict) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{colours[h]}"></i>{_attr(h)}</span>'
                                            for h in sorted(hardware)) + "</div>"
