"""Rewrites of the bench config text (``bench.pipeline_config.config_text``) the chaos scenarios
apply in their ``text_hook``: a process's block replaced or some of its lines set, a ring's capacity,
the risk limits, the sender's params, the fast stage never labelling EMERGENCY. Each raises
ValueError when the text lacks what it rewrites (the bench config changed)."""

from __future__ import annotations

import re


def replace_process(text: str, name: str, block: str) -> str:
    """The config text with process ``name``'s ``[[processes]]`` block replaced by ``block``.

    Raises:
        ValueError: no process ``name`` in the text.
    """
    pat = re.compile(r'\[\[processes\]\]\nname = "' + re.escape(name) + r'"\n.*?(?=\n\[\[|\Z)', re.S)
    new, n = pat.subn(lambda _m: block.strip() + "\n", text, count=1)
    if n != 1:
        raise ValueError(f"no process {name!r} in the config text")
    return new


def set_risk_limits(text: str, limits: str, extra_params: str = "") -> str:
    """The config text with the risk gateway's ``limits`` inline table's body replaced by ``limits``
    (TOML), and ``extra_params`` (``, key = value``...) after it.

    Raises:
        ValueError: no limits table in the text.
    """
    new, n = re.subn(r"limits = \{[^}]*\}", "limits = { " + limits + " }" + extra_params, text, count=1)
    if n != 1:
        raise ValueError("no risk limits table in the config text")
    return new


def no_emergency(text: str) -> str:
    """The fast stage never labels EMERGENCY (its threshold above any probability), so lean quoting is
    not suppressed by EMERGENCY cancel-alls and cooldowns (the generated model labels most books so).

    Raises:
        ValueError: no fast stage params in the text.
    """
    new, k = re.subn(r"(thresholds = \{[^}]*?)emergency = [0-9.]+", r"\1emergency = 2.0", text, count=1)
    if k == 0:  # no thresholds table: add one that keeps the bench's defaults but never EMERGENCY
        new, k = re.subn(r'(module = "procs.fast:FastAgent"\n(?:.*\n)*?params = \{ )',
                         r"\1thresholds = { buy = 0.3, sell = 0.3, emergency = 2.0 }, ", text, count=1)
    if k != 1:
        raise ValueError("no fast stage params in the config text")
    return new


def with_process_lines(text: str, name: str, lines: str) -> str:
    """The config text with ``lines`` (``key = value``) set in process ``name``'s table: a key the
    table already has is replaced, a new one goes after its ``module`` line.

    Raises:
        ValueError: the process is not in the text exactly once.
    """
    pat = re.compile(r'\[\[processes\]\]\nname = "' + re.escape(name) + r'"\nmodule = "[^"]+"\n(?:(?!\[\[)[^\n]*\n)*')
    matches = list(pat.finditer(text))
    if len(matches) != 1:
        raise ValueError(f"process {name!r} not found once in the config text")
    m = matches[0]
    block = m.group(0)
    for line in lines.strip().splitlines():
        key = line.split("=", 1)[0].strip()
        kp = re.compile(r"^" + re.escape(key) + r" = [^\n]*$", re.M)
        if kp.search(block):
            block = kp.sub(line.strip(), block, count=1)
        else:
            head = re.match(r'\[\[processes\]\]\nname = "[^"]+"\nmodule = "[^"]+"\n', block).group(0)
            block = head + line.strip() + "\n" + block[len(head):]
    return text[: m.start()] + block + text[m.end():]


def with_ring_capacity(text: str, ring: str, capacity: int) -> str:
    """The config text with ring ``ring``'s capacity set to ``capacity``.

    Raises:
        ValueError: the ring is not in the text exactly once.
    """
    pat = re.compile(r'(\[\[rings\]\]\nname = "' + re.escape(ring) + r'"\nmax_payload_bytes = \d+\ncapacity = )\d+')
    new, n = pat.subn(lambda m: m.group(1) + str(capacity), text)
    if n != 1:
        raise ValueError(f"ring {ring!r} not found once in the config text")
    return new


def sender_params(text: str, **kv) -> str:
    """The config text with ``kv`` added to (or replaced in) the sender's inline ``params = { ... }``.

    Raises:
        ValueError: the sender's params are not in the text.
    """
    pat = re.compile(r'(name = "sender"\nmodule = "procs.sender:SenderAgent"\n(?:[^\n]*\n)*?params = \{ )([^\n]*)\}')
    m = pat.search(text)
    if m is None:
        raise ValueError("the sender's params not found in the config text")
    body = m.group(2)
    for k, v in kv.items():
        val = f'"{v}"' if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
        kp = re.compile(r"\b" + re.escape(k) + r' = ("[^"]*"|[^,}]+)')
        body = kp.sub(f"{k} = {val}", body, count=1) if kp.search(body) else f"{k} = {val}, " + body
    return text[: m.start(2)] + body + "}" + text[m.end():]
