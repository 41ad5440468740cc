"""``up``'s status view: on a terminal one screen redrawn in place (rich's ``Live``), otherwise the
status table appended once per interval (a log a file or a pipe keeps).

``make_view(out)`` picks by ``out.isatty()``. Both views take the status snapshot
(``Supervisor.status``) with the previous message counters for the rates (``status.rates``), and
``say`` a line (start-up notes, the fork server lost): above the live screen on a terminal, in the
log otherwise. ``render`` (the snapshot as rich renderables) is pure: the tests draw it into a
recording console.
"""

from __future__ import annotations

from typing import TextIO

from pipeline.runtime.supervisor.status import format_status, guard_lines, position_rows, rates, trading_word

#: the style of each process state on the live screen
STATE_STYLE = {"RUNNING": "green", "STARTING": "yellow", "BACKOFF": "yellow", "STOPPING": "yellow",
               "STOPPED": "dim", "EXITED": "red", "FATAL": "bold red"}
#: the style of the trading word in the header, and of the latency guard's lines by its level
TRADING_STYLE = {"trading": "green", "REDUCING": "bold yellow", "HALTED": "bold red"}
GUARD_STYLE = {0: "", 1: "bold yellow", 2: "bold red"}


def render(st: dict, prev: dict[str, tuple[int, int]] | None = None, interval_s: float = 0.0, *,
           symbols: dict[int, str] | None = None):
    """The snapshot ``st`` as one rich ``Group``: the header, the processes table (rates since ``prev``),
    the latency guard, positions and net P&L, the rings, then each stage's counters (last, so a short
    terminal crops those first)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    word = trading_word(st)
    parts = [Text.assemble(("pipeline", "bold"), f"  supervisor pid {st['supervisor_pid']}  ",
                           (word, TRADING_STYLE[word]), f"  {st['plan']}  launcher: {st['launcher']}")]
    procs = Table(box=box.SIMPLE_HEAD, padding=0, collapse_padding=True, pad_edge=False, show_edge=False)
    # minimum widths: on a narrow terminal the last error is cut first
    for col, width in (("process", 8), ("state", 8), ("pid", 7), ("core", 4), ("rst", 3), ("in/s", 6), ("out/s", 6),
                       ("depth", 5), ("drops", 5), ("crc", 3), ("p50us", 7), ("p99us", 7)):
        procs.add_column(col, justify="left" if col in ("process", "state") else "right", no_wrap=True, min_width=width)
    procs.add_column("last error", overflow="ellipsis", no_wrap=True, max_width=48, min_width=0)
    for row in st["processes"]:
        r = rates(row, prev, interval_s)
        procs.add_row(row["name"], Text(row["state"], STATE_STYLE.get(row["state"], "")), str(row["pid"]),
                      str(row["core"]), str(row["restarts"]), f"{r[0]:.0f}" if r else "-", f"{r[1]:.0f}" if r else "-",
                      str(row["depth"]), str(row["drops"]), str(row["crc_errors"]), f"{row['p50_us']:.1f}",
                      f"{row['p99_us']:.1f}", Text(row["last_error"] or "", "red"))
    parts.append(procs if st["processes"] else Text("(no stage processes configured yet)"))
    level = (st.get("latency_guard") or {}).get("level", 0)
    parts += [Text(line, GUARD_STYLE.get(level, "")) for line in guard_lines(st)]
    positions = position_rows(st)
    if positions:
        pos = Table(box=box.SIMPLE_HEAD, padding=0, collapse_padding=True, pad_edge=False, show_edge=False)
        for col in ("instrument", "process", "position lots", "net P&L"):
            pos.add_column(col, justify="left" if col in ("instrument", "process") else "right")
        for name, iid, lots, pnl in positions:
            pos.add_row(f"{(symbols or {}).get(iid, '#' + str(iid))} ({iid})", name, str(lots),
                        "-" if pnl is None else format(pnl, ",.2f"))
        parts.append(pos)
    if st["rings"]:
        rings = Table(box=box.SIMPLE_HEAD, padding=0, collapse_padding=True, pad_edge=False, show_edge=False)
        for col in ("ring", "policy", "depth", "capacity", "written", "dropped", "crc_errors"):
            rings.add_column(col, justify="left" if col in ("ring", "policy") else "right", no_wrap=True)
        for r in st["rings"]:
            rings.add_row(r["name"], r["full_policy"], str(r["depth"]), str(r["capacity"]), str(r["write_cursor"]),
                          str(r["dropped"]), str(r["crc_errors"]))
        parts.append(rings)
    for row in st["processes"]:
        if row.get("stage"):
            parts.append(Text(f"{row['name']:<10} " + " ".join(f"{k}={v}" for k, v in row["stage"].items()),
                              overflow="fold"))
    return Group(*parts)


class LogView:
    """The status table appended once per interval, with a blank line after each (output that is not
    a terminal: a file, a pipe)."""

    def __init__(self, out: TextIO):
        self.out = out

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def show(self, st: dict, prev: dict[str, tuple[int, int]] | None, interval_s: float, *,
             symbols: dict[int, str] | None = None) -> None:
        self.out.write(format_status(st, prev, interval_s, symbols=symbols) + "\n\n")
        self.out.flush()

    def close(self) -> None:
        pass


class LiveView:
    """One status screen redrawn in place on a terminal (rich ``Live``, refreshed only by ``show``);
    ``say`` prints above it. ``close`` stops redrawing and leaves the last screen (and the cursor)."""

    def __init__(self, out: TextIO):
        from rich.console import Console

        self.console = Console(file=out, force_terminal=True)
        self.live = None

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def show(self, st: dict, prev: dict[str, tuple[int, int]] | None, interval_s: float, *,
             symbols: dict[int, str] | None = None) -> None:
        view = render(st, prev, interval_s, symbols=symbols)
        if self.live is None:
            from rich.live import Live

            self.live = Live(view, console=self.console, auto_refresh=False, redirect_stdout=False,
                             redirect_stderr=False, vertical_overflow="crop")
            self.live.start(refresh=True)
        else:
            self.live.update(view, refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def make_view(out: TextIO) -> LiveView | LogView:
    """``LiveView`` when ``out`` is a terminal, else ``LogView``."""
    return LiveView(out) if getattr(out, "isatty", lambda: False)() else LogView(out)
