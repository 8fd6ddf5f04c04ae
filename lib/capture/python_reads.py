"""Python values a trace reads, watched while it runs and guarded on every later call.

A trace runs the function's Python once, so a number, bool or string it reads from outside
(a global `lr`, a closure cell, `self.loss_weight`, `nn.Dropout.p`, `group['lr']` read by
user code) is baked into the graph. While a capture traces, `watching()` runs the function
under `sys.settrace`:
- in the user's code (files outside rill, the standard library and site-packages), every
  frame whose bytecode reads a global, a closure cell, or an attribute / constant-key item
  chain (`self.cfg.w`, `opt.param_groups[0]['lr']`, `group[key]`) is traced opcode by
  opcode, and at the instruction that loads the chain's root the chain is followed as the
  interpreter is about to (instance and class dicts, dict/list/tuple items; a property or a
  `__getattr__` stops it: its own code runs as a frame, watched in turn);
- in rill's own code, only the `self.<name>` reads of a Module's methods (Dropout's `p`,
  BatchNorm's `momentum`), resolved once per call; the standard library and installed
  packages are not watched (see docs/DESIGN.md, "What a trace reads from Python").
A value that is None, a bool, number, string, NumPy scalar, or a tuple or short list of
them becomes a guard: before each call the same chain is followed from the same root (the
globals dict, the cell, the object) and compared, type included; a change traces again and
says what changed. Chains through tensors stop (shapes and flags are keyed or guarded
already). `getattr(o, name)` in user code is guarded as `o.name` would be (a recording
getattr stands in for the builtin at that one instruction; see Watcher._arm_getattr); other
reads C code makes (`vars(o)`, a getattr a property cannot repeat) are said, not guarded.
"""
from __future__ import annotations

import dis
import functools
import gc
import os
import sys
import sysconfig
import threading
import types
import warnings
import weakref

import numpy as np

from .guards import Guard
from .holders import is_module
from ..tensor import Tensor

MISSING = object()   # the root or a step is gone now
OPAQUE = object()    # a step capture does not follow (property, __getattr__, C descriptor)
LIST_LIMIT = 64      # longer lists are not guarded (they hold data, not settings)

_SCALARS = (type(None), bool, int, float, complex, str, bytes, np.generic)
_ROOTS = {"LOAD_FAST": "local", "LOAD_DEREF": "deref", "LOAD_CLASSDEREF": "deref",
          "LOAD_GLOBAL": "global", "LOAD_FAST_CHECK": "local"}
_BLIND_BUILTINS = ("getattr", "vars")  # builtins that read attributes in C
_REAL_GETATTR = getattr
_RILL = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNELS = os.path.join(os.path.dirname(_RILL), "kernels")
_INSTALLED = tuple(sorted({os.path.abspath(p) + os.sep for k in ("stdlib", "platstdlib",
                           "purelib", "platlib") if (p := sysconfig.get_paths().get(k))}))


def guardable(value) -> bool:
    if isinstance(value, _SCALARS):
        return True
    if type(value) in (tuple, list) and len(value) <= LIST_LIMIT:
        # an empty list is most likely filled by the trace (a Python side effect), not a setting
        return (len(value) > 0 or type(value) is tuple) and all(guardable(v) for v in value)
    return False


def same(a, b) -> bool:
    """Equal, with the same types all the way down (1 and 1.0 and True differ to a graph),
    and NaN equal to NaN."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a == b:
        return True
    return isinstance(a, (float, np.floating)) and a != a and b != b


def frozen(value):
    """What is kept to compare against: a list is copied (it may change in place)."""
    return list(value) if type(value) is list else value


# ---- following a chain ---------------------------------------------------------------------

def _class_attr(cls, name):
    """The object `name` names in cls or its bases (not cached: a class attribute may change
    between calls, and a guard must see it)."""
    for klass in cls.__mro__:
        held = klass.__dict__
        if name in held:
            return held[name]
    return MISSING


def attribute(obj, name):
    """obj.name as Python's lookup finds it, without running user code: OPAQUE where a
    property, a C-level descriptor other than __slots__, or __getattr__ decides."""
    if isinstance(obj, types.ModuleType):
        return obj.__dict__.get(name, MISSING)
    if isinstance(obj, type):  # a class attribute read through the class
        found = _class_attr(obj, name)
        return found if found is MISSING or not hasattr(type(found), "__get__") else OPAQUE
    cls = type(obj)
    found = _class_attr(cls, name)
    if found is not MISSING:
        kind = type(found)
        if kind is types.MemberDescriptorType:  # __slots__
            try:
                return found.__get__(obj, cls)
            except AttributeError:
                return MISSING
        if hasattr(kind, "__set__") or hasattr(kind, "__delete__"):
            return OPAQUE  # a data descriptor (property) wins over the instance dict
    fields = getattr(obj, "__dict__", None)
    if type(fields) is dict and name in fields:
        return fields[name]
    if found is not MISSING:
        return found if not hasattr(type(found), "__get__") else OPAQUE
    if is_module(obj):  # Module.__getattr__: parameters, buffers, submodules
        for registry in ("_parameters", "_buffers", "_modules"):
            held = obj.__dict__.get(registry)
            if held and name in held:
                return held[name]
    return OPAQUE if _class_attr(cls, "__getattr__") is not MISSING else MISSING


def item(obj, key):
    if type(obj) in (list, tuple) or (isinstance(obj, dict) and
                                      type(obj).__getitem__ is dict.__getitem__):
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return OPAQUE


def follow(value, steps):
    for kind, key in steps:
        if value is MISSING or value is OPAQUE or isinstance(value, Tensor):
            return OPAQUE if value is not MISSING else MISSING
        value = attribute(value, key) if kind == "attr" else item(value, key)
    return value


# ---- what a code object reads --------------------------------------------------------------

class Site:
    """A read at one instruction: a root (a local, a closure cell, a global) and the
    attribute / item steps the code takes from it."""
    __slots__ = ("root", "name", "steps", "item_locals", "line")

    def __init__(self, root, name, steps, item_locals, line):
        self.root, self.name, self.steps = root, name, steps
        self.item_locals, self.line = item_locals, line


def _loads_method(ins) -> bool:
    """3.12+: LOAD_ATTR with its low bit set loads a method to call (not a value)."""
    return sys.version_info >= (3, 12) and ins.arg is not None and bool(ins.arg & 1)


_SITES: dict = {}  # code -> {offset: Site} (empty: nothing to watch)


def _sites(code) -> dict:
    hit = _SITES.get(code)
    if hit is not None:
        return hit
    sites: dict = {}
    ins = list(dis.get_instructions(code))
    line = code.co_firstlineno
    for i, op in enumerate(ins):
        line = op.positions.lineno if getattr(op, "positions", None) and \
            op.positions.lineno else (op.starts_line or line)
        kind = _ROOTS.get(op.opname)
        if kind is None:
            continue
        name = op.argval
        if kind == "deref":
            kind = "free" if name in code.co_freevars else "local"
        steps, item_locals, j = [], [], i + 1
        while j < len(ins):
            nxt = ins[j]
            if (nxt.opname == "DUP_TOP" or nxt.opname == "COPY" and nxt.arg == 1) and \
                    j + 1 < len(ins) and ins[j + 1].opname == "LOAD_ATTR":
                j += 1  # obj.name += ...: the object is copied, then read
            elif nxt.opname == "LOAD_ATTR" and not _loads_method(nxt):
                steps.append(("attr", nxt.argval))
                j += 1
            elif (nxt.opname in ("LOAD_CONST", "LOAD_FAST") and j + 1 < len(ins) and
                  ins[j + 1].opname == "BINARY_SUBSCR"):
                if nxt.opname == "LOAD_FAST":
                    item_locals.append((len(steps), nxt.argval))
                steps.append(("item", nxt.argval))
                j += 2
            else:
                break
        if steps or kind in ("global", "free"):
            sites[op.offset] = Site(kind, name, tuple(steps), tuple(item_locals), line)
    _SITES[code] = sites
    return sites


_SELF_READS: dict = {}  # code -> names read as self.<name> (rill's Module methods)


def _self_reads(code) -> tuple:
    hit = _SELF_READS.get(code)
    if hit is None:
        first = code.co_varnames[0] if code.co_argcount else None
        hit = tuple(sorted({s.steps[0][1] for s in _sites(code).values()
                            if s.root == "local" and s.name == first == "self" and
                            s.steps and s.steps[0][0] == "attr"}))
        _SELF_READS[code] = hit
    return hit


_PLACE: dict = {}  # filename -> "user", "rill.nn", "rill" or "installed"
_NN = os.path.join(_RILL, "nn") + os.sep  # the Modules: their settings are watched


def _place(filename: str) -> str:
    hit = _PLACE.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        if path.startswith(_NN):
            hit = "rill.nn"
        elif path.startswith((_RILL + os.sep, _KERNELS + os.sep)):
            hit = "rill"
        elif filename.startswith("<frozen") or path.startswith(_INSTALLED):
            hit = "installed"
        else:
            hit = "user"
        _PLACE[filename] = hit
    return hit


# ---- guards --------------------------------------------------------------------------------

class Read(Guard):
    """One Python value the trace read: `root` then `steps` gives it again. `fast` reads it
    in one C-level call where the path allows (a globals dict or instance dict entry, a
    cell); any difference it sees is confirmed by the full lookup (`now`)."""
    __slots__ = ("root_kind", "root", "key", "steps", "fast")

    def __init__(self, label, root_kind, root, key, steps, value):
        self.root_kind, self.root, self.key, self.steps = root_kind, root, key, steps
        super().__init__(label, self.now, frozen(value))
        self.fast = self.now
        if root_kind == "dict" and not steps:
            self.fast = functools.partial(dict.get, root, key, MISSING)
        elif root_kind == "cell" and not steps:
            self.fast = functools.partial(getattr, root, "cell_contents", MISSING)
        elif root_kind == "object" and len(steps) == 1 and steps[0][0] == "attr":
            fields, name = getattr(root, "__dict__", None), steps[0][1]
            if type(fields) is dict and fields.get(name, MISSING) is value:
                self.fast = functools.partial(dict.get, fields, name, MISSING)
            elif type(fields) is dict:  # a class attribute: the instance, then each class
                dicts = tuple(k.__dict__ for k in type(root).__mro__)
                self.fast = functools.partial(_first, (fields,) + dicts, name)
        elif root_kind == "object" and len(steps) == 1 and isinstance(root, dict) and \
                type(root).__getitem__ is dict.__getitem__:
            self.fast = functools.partial(dict.get, root, steps[0][1], MISSING)

    def now(self):
        kind = self.root_kind
        if kind == "dict":        # a globals dict and a name
            value = self.root.get(self.key, MISSING)
        elif kind == "cell":
            try:
                value = self.root.cell_contents
            except ValueError:
                value = MISSING
        else:
            value = self.root
        return follow(value, self.steps) if self.steps else value

    def failure(self) -> str | None:
        now = self.now()
        if now is self.value or same(now, self.value):
            return None
        shown = "gone" if now is MISSING else "not readable by capture" if now is OPAQUE \
            else repr(now)
        return (f"{self.label} was {self.value!r} when traced and is {shown} now (a value "
                "that changes often is better held in a 0-d tensor changed in place, e.g. "
                "lr.fill_(new): a graph reads tensors on every call without tracing again)")


def _first(dicts, name):
    for d in dicts:
        if name in d:
            return d[name]
    return MISSING


class Reads:
    """All of a trace's Read guards as one check: a tight loop of fast reads."""

    def __init__(self, reads):
        self.reads = list(reads)

    def failure(self) -> str | None:
        for read in self.reads:
            try:
                now = read.fast()
            except Exception:  # an emptied cell, a step that no longer applies
                now = MISSING
            if now is read.value:
                continue
            why = read.failure()
            if why is not None:
                return why
        return None


# code object -> (its reference count then, weak references to the closures running it): what
# gc.get_referrers found in an earlier trace. It walks every object of the process (~50 ms a
# call in a test session; it made test_ops' captured cases 8x slower), so a later trace
# reuses its answer while that answer provably still holds: none of those closures has died
# and the code's reference count is the same, so no function with this code was made since
# (each holds a reference to its code). Anything else (a new closure, a recursion, a death)
# walks the heap again.
_CLOSURES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _closures_running(code) -> list:
    """The live functions with closures whose code is `code`."""
    known = _CLOSURES.get(code)
    if known is not None and known[0] == sys.getrefcount(code):
        funcs = [ref() for ref in known[1]]
        if all(f is not None for f in funcs):
            return funcs
    funcs = [f for f in gc.get_referrers(code)
             if isinstance(f, types.FunctionType) and f.__code__ is code and f.__closure__]
    _CLOSURES[code] = (sys.getrefcount(code), [weakref.ref(f) for f in funcs])
    return funcs


class Watcher:
    """Collects Read guards while a trace runs; see `watching`."""

    def __init__(self, fn, collected):
        self.collected = collected
        self.seen: dict = {}         # (root kind, id(root), key, steps) -> Read
        self.cells: dict = {}        # code -> [function objects running it]
        func = getattr(fn, "__func__", fn)
        code = getattr(func, "__code__", None)
        if code is not None and func.__closure__:
            self.cells[code] = [func]
        self.unseen: list = []       # closure variables whose cell could not be found
        self.blind: list = []        # calls of vars(), getattr() reads not guarded
        self.armed = None            # (builtins dict, the real getattr) while swapped

    # sys.settrace's global function: one call per Python frame entered.
    def on_call(self, frame, event, arg):
        code = frame.f_code
        place = _place(code.co_filename)
        if place == "user":
            if _sites(code):
                frame.f_trace_opcodes = True
                return self.on_opcode
        elif place == "rill.nn" and _self_reads(code):
            self._rill_method(frame, code)
        return None

    def on_opcode(self, frame, event, arg):
        if self.armed is not None:  # the LOAD_GLOBAL that found the recording getattr ran
            self.disarm()
        if event == "opcode":
            site = _sites(frame.f_code).get(frame.f_lasti)
            if site is not None:
                self._read(frame, site)
        return self.on_opcode

    def _rill_method(self, frame, code) -> None:
        obj = frame.f_locals.get("self")
        if not is_module(obj):
            return
        where = f"{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}"
        for name in _self_reads(code):
            value = attribute(obj, name)
            if guardable(value):
                self._add("object", obj, None, (("attr", name),), value,
                          f"{type(obj).__name__}.{name}", where)

    def _read(self, frame, site: Site) -> None:
        steps = site.steps
        if site.item_locals:  # item keys held in locals: their values now
            steps = list(steps)
            for index, local in site.item_locals:
                key = frame.f_locals.get(local, MISSING)
                if key is MISSING:
                    return
                steps[index] = ("item", key)
            steps = tuple(steps)
        if site.root == "global":
            g = frame.f_globals
            if site.name not in g:  # a builtin
                if site.name == "getattr":
                    self._arm_getattr(frame, site)
                elif site.name in _BLIND_BUILTINS:
                    self._unseen(frame, site, self.blind)
                return
            kind, root, key, value = "dict", g, site.name, g[site.name]
        elif site.root == "free":
            # A read that would not be guarded needs no cell: finding one walks the heap
            # (gc.get_referrers, ~50 ms a call in a large process), so it is done only for
            # a value that is guarded (a number, not the function or module most closures
            # read). _guard would follow the same steps from the cell's contents.
            if not guardable(follow(frame.f_locals.get(site.name, MISSING), steps)):
                return
            cells = self._cells_of(frame, site.name)
            if not cells:
                value = frame.f_locals.get(site.name, MISSING)
                if guardable(follow(value, steps)):
                    self._unseen(frame, site)
                return
            for cell in cells[1:]:
                self._guard("cell", cell, None, steps, frame, site)
            kind, root, key = "cell", cells[0], None
        else:
            kind, root, key = "object", frame.f_locals.get(site.name, MISSING), None
            if root is MISSING:
                return
        self._guard(kind, root, key, steps, frame, site)

    def _guard(self, kind, root, key, steps, frame, site) -> None:
        if kind == "cell":
            try:
                start = root.cell_contents
            except ValueError:
                return
        else:
            start = root if kind == "object" else root[key]
        value = follow(start, steps) if steps else start
        if not guardable(value):
            return
        if kind == "object" and type(root) is tuple and all(s == "item" for s, _ in steps):
            return  # an item of a tuple of numbers never changes
        code = frame.f_code
        where = (f"{getattr(code, 'co_qualname', code.co_name)} at "
                 f"{os.path.basename(code.co_filename)}:{site.line}")
        path = site.name + "".join(f".{k}" if s == "attr" else f"[{k!r}]" for s, k in steps)
        self._add(kind, root, key, steps, value, path, where)

    # getattr(obj, name) reads in C, where the opcode tracer cannot see the value. At the
    # LOAD_GLOBAL of `getattr` in user code (the opcode event comes before the instruction
    # runs), the frame's builtins hold a recording getattr for that one instruction: the
    # name loads it, and it is put back at the frame's next event. Called from that frame,
    # on this thread, it guards a number, bool or string read as obj.name would be; a read
    # the guard could not repeat without running code (a property, __getattr__, a default
    # for a missing attribute) is said instead, as vars() is.
    def _arm_getattr(self, frame, site) -> None:
        builtins_ = frame.f_builtins
        real = builtins_.get("getattr")
        if self.armed is not None or real is not _REAL_GETATTR:
            self._unseen(frame, site, self.blind)
            return
        thread, watcher = threading.get_ident(), self

        def getattr_recorded(obj, name, *default):
            value = real(obj, name, *default)
            if threading.get_ident() == thread and sys._getframe(1) is frame and \
                    type(name) is str and guardable(value):
                if same(attribute(obj, name), value):
                    code = frame.f_code
                    where = (f"{getattr(code, 'co_qualname', code.co_name)} at "
                             f"{os.path.basename(code.co_filename)}:{frame.f_lineno}")
                    watcher._add("object", obj, None, (("attr", name),), value,
                                 f"getattr({type(obj).__name__}, {name!r})", where)
                else:
                    watcher._unseen(frame, site, watcher.blind)
            return value
        builtins_["getattr"] = getattr_recorded
        self.armed = (builtins_, real)

    def disarm(self) -> None:
        if self.armed is not None:
            builtins_, real = self.armed
            builtins_["getattr"] = real
            self.armed = None

    def _add(self, kind, root, key, steps, value, path, where) -> None:
        ident = (kind, id(root), key, steps)
        if ident in self.seen:
            return
        read = Read(f"`{path}` (read in {where})", kind, root, key, steps, value)
        self.seen[ident] = read
        self.collected.reads.append(read)

    def _cells_of(self, frame, name) -> list:
        """The cells of `name` in the function(s) this frame runs: the captured function's
        own, else found among the functions sharing the frame's code (gc referrers, once per
        code object and trace) whose cell holds the value the frame sees."""
        code = frame.f_code
        funcs = self.cells.get(code)
        if funcs is None:
            funcs = self.cells[code] = _closures_running(code)
        index = code.co_freevars.index(name)
        value = frame.f_locals.get(name, MISSING)
        out = []
        for f in funcs:
            cell = f.__closure__[index]
            try:
                if cell.cell_contents is value:
                    out.append(cell)
            except ValueError:
                pass
        return out

    def _unseen(self, frame, site, into=None) -> None:
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)
        (self.unseen if into is None else into).append(
            f"`{site.name}` in {qualname} ({os.path.basename(code.co_filename)}:{site.line})")

    def finish(self, name: str) -> None:
        """After the trace: a watched value the trace itself changed (a counter, a lazy
        flag) is guarded as the trace left it, and said (that change happens once); closure
        variables that could not be watched are said."""
        changed = []
        for ident, read in list(self.seen.items()):
            now = read.now()
            if now is read.value or same(now, read.value):
                continue
            if not guardable(now):  # a container the trace filled: a side effect, documented
                self.collected.reads.remove(read)
                del self.seen[ident]
                continue
            changed.append(f"{read.label}: {read.value!r} -> {now!r}")
            read.value = frozen(now)
        from .function import CaptureWarning
        if changed:
            warnings.warn(
                f"while tracing {name} the function changed Python value(s) it reads: "
                f"{'; '.join(changed[:5])}. That Python code runs once, while tracing, not on "
                "every call; keep such state in tensors (changed in place) or outside the "
                "captured function", CaptureWarning, stacklevel=4)
        if self.blind:
            warnings.warn(
                f"{name} reads attributes through {', '.join(sorted(set(self.blind))[:5])}: "
                "values read by getattr()/vars() (reads made in C) are not watched, so a "
                "number, bool or string read that way is baked into the graph. Write the read "
                "as obj.name (watched), or pass the value as an argument (numbers as 0-d "
                "tensors)", CaptureWarning, stacklevel=4)
        if self.unseen:
            warnings.warn(
                f"{name} reads closure variable(s) capture cannot watch: "
                f"{', '.join(sorted(set(self.unseen))[:5])}; their values are baked into "
                "the graph. Pass them as arguments (numbers as 0-d tensors) or read them from "
                "an object's attribute, which capture watches", CaptureWarning, stacklevel=4)


def relabel(reads: list, paths: dict, called: dict) -> list:
    """Name a Module's settings by where they sit in the model (`blocks.0.dropout.p`, from
    `paths`: id(object) -> attribute path); drop `training` reads of modules that were
    called (guarded already, see guards.module_called)."""
    kept = []
    for read in reads:
        if read.root_kind == "object" and read.steps:
            if read.steps == (("attr", "training"),) and id(read.root) in called:
                continue
            path = paths.get(id(read.root))
            if path is not None:
                tail = "".join(f".{k}" if s == "attr" else f"[{k!r}]" for s, k in read.steps)
                where = read.label[read.label.index("` (") + 1:]
                read.label = f"`{path}{tail}`{where}"
        kept.append(read)
    return kept


class watching:
    """Context manager around a trace: Read guards go to `collected.reads`."""

    def __init__(self, fn, collected, name: str):
        self.watcher, self.name = Watcher(fn, collected), name

    def __enter__(self):
        self._before = sys.gettrace()
        if self._before is None:
            sys.settrace(self.watcher.on_call)
        else:  # a debugger or coverage: both see every frame
            sys.settrace(_chained(self._before, self.watcher.on_call))
        return self.watcher

    def __exit__(self, kind, exc, tb):
        sys.settrace(self._before)
        self.watcher.disarm()
        if kind is None:
            self.watcher.finish(self.name)


def _chained(theirs, ours):
    """A global trace function that gives each frame both tracers' local functions."""
    def both_local(a, b):
        def local(frame, event, arg):
            nonlocal a, b
            a = a(frame, event, arg) if a is not None else None
            b = b(frame, event, arg) if b is not None else None
            return local if (a is not None or b is not None) else None
        return local

    def on_call(frame, event, arg):
        a, b = theirs(frame, event, arg), ours(frame, event, arg)
        if a is None or b is None:
            return a or b
        return both_local(a, b)
    return on_call
