"""An operation's timeline as one SVG picture, drawn on the server from its facts.

    intent  dispatch#1        dispatch#2 ░░ lag window ░░        deadline
      │        ▲                  ▲ ░░░░░░░░░░░░░░░░░░░░            ┃
      ├────────┼──────○───────────┼───────────────○──●───────────────┃───▶ time
      │                 probe: zero                  receipt / match
      │                                                    ◆ resolution (human)

Lanes from top: dispatches (attempts), provider evidence (probes, receipts), people
(resolutions, approvals, refused retries). The shaded band is the visibility lag after the
latest dispatch: a zero seen inside it proves nothing yet. Every mark has a tooltip.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from reconciler.core.domain import (
    Approval,
    Authority,
    Compensation,
    Evidence,
    Facts,
    IntentConflict,
    Observation,
    ProviderContract,
    Receipt,
    RefusedRetry,
    Resolution,
)
from reconciler.core.verdicts import reconcile_deadline

WIDTH, HEIGHT, LEFT, RIGHT = 960, 170, 70, 30
LANES = {"dispatch": 45, "provider": 85, "human": 125}


@dataclass(frozen=True, slots=True)
class Mark:
    at: datetime
    lane: str
    css: str
    title: str


def marks_of(facts: Facts) -> list[Mark]:
    """Every fact of the operation as a mark on its lane, in recorded order."""
    marks = [Mark(facts.intent.at, "dispatch", "intent", f"intent recorded {facts.intent.at}")]
    marks += [Mark(a.at, "dispatch", "attempt",
                   f"attempt {a.number}: {a.outcome.value}"
                   + (f" {a.status}" if a.status else "") + f" at {a.at}")
              for a in facts.attempts]
    marks += [_evidence_mark(e) for e in facts.evidence]
    return marks


def _evidence_mark(e: Evidence) -> Mark:
    match e:
        case Observation():
            found = ", ".join(m.provider_ref for m in e.matches) or "zero matches"
            css = ("probe-error" if e.error or e.authority is Authority.UNAVAILABLE
                   else "probe-match" if e.matches else "probe-zero")
            return Mark(e.at, "provider", css, f"probe {e.probe} ({e.authority.value}): "
                        f"{e.error or found} at {e.at}")
        case Receipt():
            return Mark(e.at, "provider", "receipt", f"receipt {e.provider_ref} from "
                        f"{e.source} at {e.at}")
        case Resolution():
            return Mark(e.at, "human", "resolution", f"resolved {e.verdict.value} by {e.actor}: "
                        f"{e.note} at {e.at}")
        case Approval():
            return Mark(e.at, "human", "approval", f"retry approved by {e.actor}: {e.note} "
                        f"at {e.at}")
        case IntentConflict():
            return Mark(e.at, "human", "conflict", f"conflicting intent refused at {e.at}")
        case RefusedRetry():
            return Mark(e.at, "human", "conflict", f"retry refused to {e.holder} at {e.at}")
        case Compensation():
            return Mark(e.at, "human", "compensation", f"compensated ({e.reference}) by "
                        f"{e.actor}: {e.note} at {e.at}")
    raise TypeError(f"not evidence: {type(e).__name__}")


def timeline_svg(facts: Facts, contract: ProviderContract, now: datetime) -> str:
    """The SVG (a string of markup, every text escaped) of the operation's timeline."""
    marks = marks_of(facts)
    latest = max([facts.intent.at, *(a.at for a in facts.attempts)])
    lag_end = latest + timedelta(seconds=contract.visibility_lag_s)
    deadline = reconcile_deadline(facts.intent, contract)
    start = facts.intent.at
    end = max([*(m.at for m in marks), lag_end, deadline, start + timedelta(seconds=1)])
    span = (end - start).total_seconds()

    def x(at: datetime) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (at - start).total_seconds() / span

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" aria-label="operation timeline">',
             f'<rect class="lag" x="{x(latest):.1f}" y="25" '
             f'width="{max(x(lag_end) - x(latest), 1):.1f}" height="115">'
             f'<title>visibility lag: {contract.visibility_lag_s:g}s after the latest '
             f'dispatch</title></rect>']
    for lane, y in LANES.items():
        parts.append(f'<line class="lane" x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}"/>'
                     f'<text class="lane-name" x="2" y="{y + 4}">{lane}</text>')
    parts.append(f'<line class="deadline" x1="{x(deadline):.1f}" y1="15" x2="{x(deadline):.1f}" '
                 f'y2="150"><title>reconcile deadline {escape(str(deadline))}</title></line>'
                 f'<text class="deadline-label" x="{x(deadline) + 4:.1f}" y="12">deadline</text>')
    if start <= now <= end:
        parts.append(f'<line class="now" x1="{x(now):.1f}" y1="20" x2="{x(now):.1f}" '
                     f'y2="150"><title>now</title></line>')
    for mark in marks:
        cx, cy = x(mark.at), LANES[mark.lane]
        parts.append(f'<circle class="mark {mark.css}" cx="{cx:.1f}" cy="{cy}" r="6">'
                     f'<title>{escape(mark.title)}</title></circle>')
    parts.append(f'<text class="time" x="{LEFT}" y="165">{escape(_hms(start))}</text>'
                 f'<text class="time" x="{WIDTH - RIGHT}" y="165" text-anchor="end">'
                 f'{escape(_hms(end))} (+{span:g}s)</text></svg>')
    return "".join(parts)


def _hms(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")
