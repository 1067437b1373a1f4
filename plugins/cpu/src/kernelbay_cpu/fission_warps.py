"""Warp operations under barrier loop fission: a statement that calls shuffles, votes, a tile's
``shfl``/``ballot``/``any``/``all`` or ``cooperative_groups::reduce`` becomes a split point. The
loop before it stores each lane's operand in a lane array, the operation runs on the lane
arrays between the loops (include/kb_cpu_fission.h), and the loop after it reads each lane's
result there."""

from __future__ import annotations

import re

from .fission_ranges import pure_read
from .fission_scan import arguments, closing, line_of, pad, skip_ws
from .fission_state import KEYWORD_START, LOOKS_DECL, Giveup, Rewrite

WARP_CALL = re.compile(
    r"\b(?P<intr>__shfl_sync|__shfl_up_sync|__shfl_down_sync|__shfl_xor_sync|__ballot_sync|__any_sync|__all_sync)"
    r"\s*\(|\b(?P<obj>[A-Za-z_]\w*)\s*\.\s*(?P<meth>shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)\s*\("
    r"|(?P<red>(?:\b(?:cg|cooperative_groups)\s*::\s*)?\breduce)\s*\("
)
_OPS = {
    "__shfl_sync": "W_SHFL",
    "__shfl_up_sync": "W_UP",
    "__shfl_down_sync": "W_DOWN",
    "__shfl_xor_sync": "W_XOR",
    "shfl": "W_SHFL",
    "shfl_up": "W_UP",
    "shfl_down": "W_DOWN",
    "shfl_xor": "W_XOR",
}
_VOTES = {"__ballot_sync": "V_BALLOT", "__any_sync": "V_ANY", "__all_sync": "V_ALL"}
_TILE_VOTES = {"ballot": "V_TILE_BALLOT", "any": "V_TILE_ANY", "all": "V_TILE_ALL"}
_VOTE_TYPES = {"V_BALLOT": "unsigned", "V_ANY": "int", "V_ALL": "int", "V_TILE_BALLOT": "unsigned"}
#: A warp's reduction written as a loop of shuffles, `for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(~0u,
#: v, o);` (or __shfl_down_sync, another compound operator, `v = fmaxf(v, ...)`), with a literal full mask.
_REDUCTION_LOOP = re.compile(
    r"for\s*\(\s*(?:int|unsigned)\s+(?P<o>[A-Za-z_]\w*)\s*=\s*(?P<first>16|8|4|2|1)\s*;"
    r"\s*(?P=o)\s*(?:>\s*0|>=\s*1|!=\s*0)\s*;"
    r"\s*(?:(?P=o)\s*/=\s*2|(?P=o)\s*>>=\s*1|(?P=o)\s*=\s*(?P=o)\s*(?:/\s*2|>>\s*1))\s*\)"
    r"\s*(?P<open>\{)?\s*(?P<v>[A-Za-z_]\w*)\s*"
    r"(?:(?P<op>[-+*&|^])=\s*(?P<call1>__shfl_(?:xor|down)_sync)\s*\(|=\s*(?P<fn>fmaxf|fminf|fmax|fmin|max|min)\s*\("
    r"\s*(?P=v)\s*,\s*(?P<call2>__shfl_(?:xor|down)_sync)\s*\()"
    r"\s*(?P<mask>0[xX][fF]{8}[uU]?|~0[uU]?)\s*,\s*(?P=v)\s*,\s*(?P=o)\s*(?:,\s*32\s*)?\)"
    r"(?(fn)\s*\))\s*;\s*(?(open)\}|)"
)


def warp_calls(rw: Rewrite, s: int, e: int) -> list[re.Match[str]]:
    """The warp operations called in ``code[s:e]`` (a ``reduce`` only over a known tile)."""
    return [c for c in WARP_CALL.finditer(rw.code, s, e) if c.group("red") is None or _reduces(rw, c)]


def _reduces(rw: Rewrite, c: re.Match[str]) -> bool:
    code = rw.code
    paren = c.end() - 1
    close = closing(code, paren)
    first = arguments(code, paren, close)[:1] if close > 0 else []
    return bool(first) and code[first[0][0] : first[0][1]].strip() in rw.tiles


def _lane_arg(rw: Rewrite, j: int, raw: str, txt: str, tail: list[str]) -> tuple[str, str]:
    """A shuffle's lane or offset, as (uniform value, per-lane array): as written where every
    thread computes it alike, else stored per lane before the split."""
    if rw.uniform(raw):
        return f"(int)({txt})", "nullptr"
    rw.lanes.add(f"kb_a{j}")
    tail.append(f"::kb_cpu::fis::put(kb_a{j}, kb_t, (int)({txt}));")
    return "0", f"::kb_cpu::fis::at<int>(kb_a{j})"


def _operand(k: int, j: int, txt: str, tail: list[str], after: list[str]) -> str:
    """The operand stored in lane array j before the split; its type named kb_T<k> after it."""
    tail.append(f"::kb_cpu::fis::put(kb_l{j}, kb_t, ({txt}));")
    after.append(f"using kb_T{k} = ::std::decay_t<decltype({txt})>;")
    return f"kb_T{k}"


def warp_statement(rw: Rewrite, s: int, e: int, calls: list[re.Match[str]]) -> None:
    """Split at the statement ``code[s:e]``, which makes the warp operations ``calls``."""
    text, code = rw.text, rw.code
    where = f"line {line_of(code, s)}"
    spans = []
    for c in calls:
        paren = c.end() - 1
        close = closing(code, paren)
        if close < 0 or close >= e:
            raise Giveup(f"a warp operation that could not be delimited ({where})")
        spans.append((c, paren, close))
    for c, _, close in spans:
        if any(c.start() < o.start() < close for o, _, _ in spans if o is not c):
            raise Giveup(f"a warp operation inside another's arguments ({where})")
    tail: list[str] = []
    after: list[str] = []
    subs: list[tuple[int, int, str]] = []
    for j, (c, paren, close) in enumerate(spans):
        k = rw.sites
        rw.sites += 1
        lane = f"kb_l{j}"
        rw.lanes.add(lane)
        args = arguments(code, paren, close)
        txt = [text[x:y].strip() for x, y in args]
        raw = [code[x:y] for x, y in args]
        line = line_of(code, c.start())
        intr, obj, meth = c.group("intr"), c.group("obj"), c.group("meth")
        if intr is not None:
            if not raw or not rw.uniform(raw[0]):
                raise Giveup(f"a warp operation's mask that may differ between threads ({where})")
            mask = f"kb_m{k}"
            if intr in _OPS:
                if len(args) not in (3, 4):
                    raise Giveup(f"{intr} with {len(args)} arguments ({where})")
                if len(args) == 4 and not rw.uniform(raw[3]):
                    raise Giveup(f"a shuffle width that may differ between threads ({where})")
                width = txt[3] if len(args) == 4 else "32"
                t = _operand(k, j, txt[1], tail, after)
                arg, per_lane = _lane_arg(rw, j, raw[2], txt[2], tail)
                after.append(
                    f"const unsigned {mask} = ::kb_cpu::fis::check(kb_fb, ::kb_cpu::{_OPS[intr]}, "
                    f"(unsigned)({txt[0]}), (int)({width}), {line});"
                )
                after.append(
                    f"::kb_cpu::fis::shuffle<{t}>(kb_fb, {lane}, ::kb_cpu::{_OPS[intr]}, {mask}, 0u, {arg}, "
                    f"{per_lane}, (int)({width}), {line});"
                )
                rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
            else:
                if len(args) != 2:
                    raise Giveup(f"{intr} with {len(args)} arguments ({where})")
                tail.append(f"::kb_cpu::fis::put({lane}, kb_t, (int)((int)({txt[1]}) != 0));")
                after.append(
                    f"const unsigned {mask} = ::kb_cpu::fis::check(kb_fb, ::kb_cpu::W_BALLOT, "
                    f"(unsigned)({txt[0]}), 32, {line});"
                )
                after.append(f"::kb_cpu::fis::vote<32>(kb_fb, {lane}, {mask}, ::kb_cpu::fis::{_VOTES[intr]});")
                rep = f"(({_VOTE_TYPES[_VOTES[intr]]})::kb_cpu::fis::get<int>({lane}, kb_t))"
        elif obj is not None:
            if obj not in rw.tiles:
                raise Giveup(f"{obj}.{meth} on what is not a tile of at most 32 threads ({where})")
            n = rw.tiles[obj]
            if meth in _OPS:
                if len(args) != 2:
                    raise Giveup(f"{obj}.{meth} with {len(args)} arguments ({where})")
                t = _operand(k, j, txt[0], tail, after)
                arg, per_lane = _lane_arg(rw, j, raw[1], txt[1], tail)
                after.append(
                    f"::kb_cpu::fis::shuffle<{t}>(kb_fb, {lane}, ::kb_cpu::{_OPS[meth]}, ~0u, {n}u, {arg}, "
                    f"{per_lane}, {n}, {line});"
                )
                rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
            else:
                if len(args) != 1:
                    raise Giveup(f"{obj}.{meth} with {len(args)} arguments ({where})")
                kind = _TILE_VOTES[meth]
                tail.append(f"::kb_cpu::fis::put({lane}, kb_t, (int)((int)({txt[0]}) != 0));")
                after.append(f"::kb_cpu::fis::vote<{n}>(kb_fb, {lane}, 0u, ::kb_cpu::fis::{kind});")
                rep = f"(({_VOTE_TYPES.get(kind, 'bool')})::kb_cpu::fis::get<int>({lane}, kb_t))"
        else:
            if len(args) != 3:
                raise Giveup(f"cooperative_groups::reduce with {len(args)} arguments ({where})")
            n = rw.tiles[txt[0]]
            if set(re.findall(r"\b[A-Za-z_]\w*\b", raw[2])) & (set(rw.remat) | set(rw.cg) | set(rw.arrays)):
                raise Giveup(f"a reduce operator that reads the thread's locals ({where})")
            t = _operand(k, j, txt[1], tail, after)
            after.append(f"::kb_cpu::fis::reduce<{n}, {t}>(kb_fb, {lane}, {txt[2]}, {line});")
            rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
        subs.append((c.start(), close + 1, pad(rep, text[c.start() : close + 1])))
    rw.flush(" ".join(tail), " ".join(after), s)
    d = rw.decl.match(code, skip_ws(code, s, e), e)
    if d:
        rw.declare(s, e, d, subs, True)
    else:
        if LOOKS_DECL.match(code[s:e].strip()) and not KEYWORD_START.match(code[s:e].strip()):
            raise Giveup(f"a local of a type the loop path does not store per thread ({where})")
        rw.edits.extend(subs)
    names = pure_read(rw, s, e, [(c.start(), close + 1) for c, _, close in spans])
    if names:
        rw.pure[s] = names
    rw.region.append((s, e))


def reduction_loop(rw: Rewrite, s: int, e: int) -> bool:
    """Split at ``code[s:e]`` if it is a warp's reduction loop (:data:`_REDUCTION_LOOP`) over a
    per-thread local: one put before it, its steps between the loops (kb_cpu::fis::steps, one pass
    each, where the loop makes three), one read after it. False where it is not one."""
    code = rw.code
    m = _REDUCTION_LOOP.fullmatch(code[s:e].strip())
    v = m and m.group("v")
    if not m or v not in rw.arrays:
        return False
    call = m.group("call1") or m.group("call2")
    kind = "W_XOR" if call == "__shfl_xor_sync" else "W_DOWN"
    k = rw.sites
    rw.sites += 1
    lane = "kb_l0"
    rw.lanes.add(lane)
    t = f"kb_T{k}"
    line = line_of(code, code.index(call, s))
    step = f"kb_a {m.group('op')}= kb_b; return kb_a;" if m.group("op") else f"return {m.group('fn')}(kb_a, kb_b);"
    after = (
        f"using {t} = ::std::decay_t<decltype({v})>; "
        f"(void)::kb_cpu::fis::check(kb_fb, ::kb_cpu::{kind}, (unsigned)({m.group('mask')}), 32, {line}); "
        f"::kb_cpu::fis::steps<32, ::kb_cpu::{kind}, {t}>(kb_fb, {lane}, {m.group('first')}, "
        f"[]({t} kb_a, {t} kb_b) -> {t} {{ {step} }}, {line});"
    )
    rw.flush(f"::kb_cpu::fis::put({lane}, kb_t, ({v}));", after, s)
    rw.edits.append((s, e, pad(f"{v} = ::kb_cpu::fis::result<{t}>({lane}, kb_t);", rw.text[s:e])))
    rw.pure[s] = [v]
    rw.region.append((s, e))
    return True
