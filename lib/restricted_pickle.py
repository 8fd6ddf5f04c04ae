"""A pickle reader that runs no code: the one way rill reads another framework's pickles.

`pickle.load` calls whatever a file names (`os.system` through `__reduce__` is one line of a
crafted file), so rill never calls it on a file. `loads` interprets the opcodes itself, over
`pickletools.genops` (which decodes opcodes and never calls anything): containers, scalars,
strings and bytes are built here, and a global is only looked up in the `allowed` table the
caller passes (by its qualified name, without importing anything). Calling (REDUCE, NEWOBJ)
is allowed only on `Call` objects from that table; anything else a pickle asks for (another
global, INST/OBJ, extension codes, setting state on an object) raises `Refused`, naming it,
before it happens.

Memory is bounded by the pickle's length: every opcode builds at most one object from
arguments already read, and memo references share, they do not copy. What a `Call` builds
from its arguments (a tensor from a storage) is the caller's to bound.
"""
from __future__ import annotations

import io
import pickletools
from collections import OrderedDict


class Refused(Exception):
    """The pickle asks for something this reader will not do; the message says what."""


class Call:
    """A function a pickle may call, under the global name it is pickled as."""

    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn):
        self.name, self.fn = name, fn

    def __repr__(self) -> str:
        return f"<{self.name}>"


_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
# Opcodes whose decoded argument is the value pushed (ints, floats, strings, bytes).
_VALUES = frozenset({
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"})
_EMPTY = {"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_SET": set}
_PUT = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET = frozenset({"GET", "BINGET", "LONG_BINGET"})
_TUPLE_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


# One loop over the opcodes, each branch a few lines, read top to bottom against the pickle
# protocol: split into handlers, the stack and memo would travel through every call.
def loads(data: bytes, *, allowed, persistent_load=None, build=None):  # noqa: C901
    """The object pickled in `data`, built without running code from it.

    allowed: qualified name ('module name', as the pickle spells it) -> the object a
        GLOBAL pushes: a `Call` to let REDUCE call it, or any plain marker value.
    persistent_load(pid): the object a persistent id stands for (BINPERSID); without it,
        persistent ids are refused.
    build(obj, state): BUILD's meaning (set `state` on `obj`); without it, BUILD is refused.
    """
    stack, marks, memo = [], [], {}

    def pop_mark():
        if not marks:
            raise Refused("is malformed: it closes a MARK it never opened")
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    def pop(n=1):
        if len(stack) - (marks[-1] if marks else 0) < n:
            raise Refused("is malformed: an opcode takes more values than it pushed")
        items = stack[-n:]
        del stack[-n:]
        return items

    def target(kind, name):
        if not stack or not isinstance(stack[-1], kind):
            raise Refused(f"is malformed: {name} on "
                          f"{type(stack[-1]).__name__ if stack else 'an empty stack'}")
        return stack[-1]

    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = op.name
            if name in _VALUES:
                stack.append(arg)
            elif name in _CONSTANTS:
                stack.append(_CONSTANTS[name])
            elif name in _EMPTY:
                stack.append(_EMPTY[name]())
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("PROTO", "FRAME"):
                continue
            elif name == "STOP":
                (result,) = pop()
                return result
            elif name == "MARK":
                marks.append(len(stack))
            elif name == "POP":  # the top value, or the MARK on top (as pickle does)
                if marks and marks[-1] == len(stack):
                    pop_mark()
                else:
                    pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(target(object, "DUP"))
            elif name in _PUT:
                memo[arg] = target(object, name)
            elif name == "MEMOIZE":
                memo[len(memo)] = target(object, name)
            elif name in _GET:
                if arg not in memo:
                    raise Refused(f"is malformed: it reads memo entry {arg}, never written")
                stack.append(memo[arg])
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name in _TUPLE_N:
                stack.append(tuple(pop(_TUPLE_N[name])))
            elif name == "LIST":
                stack.append(pop_mark())
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2])))
            elif name == "FROZENSET":
                stack.append(frozenset(pop_mark()))
            elif name == "BYTEARRAY8":
                stack.append(bytearray(arg))
            elif name == "APPEND":
                (value,) = pop()
                target(list, name).append(value)
            elif name == "APPENDS":
                items = pop_mark()
                target(list, name).extend(items)
            elif name == "ADDITEMS":
                items = pop_mark()
                target(set, name).update(items)
            elif name == "SETITEM":
                key, value = pop(2)
                target(dict, name)[key] = value
            elif name == "SETITEMS":
                items = pop_mark()
                d = target(dict, name)
                for key, value in zip(items[::2], items[1::2]):
                    d[key] = value
            elif name in ("GLOBAL", "STACK_GLOBAL"):
                if name == "GLOBAL":
                    qualified = arg
                else:
                    module, attr = pop(2)
                    if not (isinstance(module, str) and isinstance(attr, str)):
                        raise Refused("is malformed: STACK_GLOBAL of non-strings")
                    qualified = f"{module} {attr}"
                if qualified not in allowed:
                    raise Refused(f"names the global {qualified.replace(' ', '.')}")
                stack.append(allowed[qualified])
            elif name in ("REDUCE", "NEWOBJ"):
                fn, args = pop(2)
                stack.append(_call(fn, args, name))
            elif name == "BUILD":
                obj, state = pop(2)
                if build is None:
                    raise Refused(f"sets state on a {type(obj).__name__} (BUILD)")
                build(obj, state)
                stack.append(obj)
            elif name == "BINPERSID" and persistent_load is not None:
                (pid,) = pop()
                stack.append(persistent_load(pid))
            else:  # INST, OBJ, NEWOBJ_EX, EXT1/2/4, PERSID, ...: code or names we never run
                raise Refused(f"uses the opcode {name}{f' ({arg!r:.60})' if arg else ''}, "
                              "which a file of tensors and containers does not need")
    except Refused:
        raise
    except (ValueError, TypeError, KeyError, IndexError, EOFError) as e:
        # genops' "pickle exhausted before seeing STOP", an unknown opcode, an unhashable key
        raise Refused(f"is malformed or truncated ({e})") from None
    raise Refused("is truncated: it ends before its STOP opcode")


def _call(fn, args, opcode: str):
    if not isinstance(fn, Call):
        raise Refused(f"calls {fn!r:.60} ({opcode}), which is not a function it may call")
    if not isinstance(args, tuple):
        raise Refused(f"calls {fn.name} with {type(args).__name__} arguments, not a tuple")
    try:
        return fn.fn(*args)
    except Refused:
        raise
    except TypeError as e:  # wrong arity or types: a crafted call, refused as such
        raise Refused(f"calls {fn.name} with arguments it does not take ({e})") from None


def ordered_dict(*args):
    """collections.OrderedDict as pickles call it: empty, or from a list of pairs."""
    if args and not (len(args) == 1 and isinstance(args[0], (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in args[0])):
        raise Refused("calls collections.OrderedDict with something other than pairs")
    return OrderedDict(*args)


def latin1_bytes(text, encoding="latin1"):
    """_codecs.encode as protocol 2 pickles bytes: encode(str, 'latin1')."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise Refused("calls _codecs.encode other than as protocol 2 pickles bytes")
    return text.encode("latin-1")


# Globals any pickle of plain data may use (callers add their own).
PLAIN = {
    "collections OrderedDict": Call("collections.OrderedDict", ordered_dict),
    "_codecs encode": Call("_codecs.encode", latin1_bytes),
}
