"""Parameter servers: variables live on the ps ranks, workers pull them and push gradients.

Every rank builds the same model and optimizer (same code, same seed). Each variable is
placed on one ps (largest first, on the least loaded), except embedding tables, whose rows
are split in contiguous ranges over all the ps ranks. A ps owns the values of what is
placed on it and applies the optimizer to them (any rill.optim optimizer: it runs there on
the gradients the workers send). Workers:

    ps = dist.ParameterServer(model, opt, mode="sync", backup_workers=1)
    if dist.world().role == "ps":
        stats = ps.serve()                # until every worker has closed
    else:
        for x, y in batches:
            ps.pull(rows={"emb.weight": ids})   # current values (and those rows only)
            if ps.step >= total_steps:          # the global step: optimizer steps applied
                break
            ps.backward(loss_fn(model(x), y))   # gradients computed and pushed
        ps.close()

A ps rank that calls the worker's methods (pull, push, backward, close), a worker that calls
serve(), and a ps rank whose script ends without serving fail with a DistributedError saying
so (roles.py). On a worker the optimizer is the ps's: its step() and state_dict() refuse.
`state_dict()` / `load_state_dict()` checkpoint the job's training state, which lives on the
ps ranks (ps_state.py): `Checkpoint(ps=ps)` resumes a restarted job exactly.

mode="async": each push is applied when it arrives. mode="sync": step s is applied once the
first n - b pushes for it have arrived (n workers, b backup workers), as their mean; pushes
that arrive later for a step already applied are dropped and counted; a worker's next pull
waits until the ps has applied the step it pushed for, and a straggler catches up to the
current step.

Messages travel as wire.py's typed buffers (a fixed header, then named raw arrays) and are
checked on receipt against the receiver's own variables (names, shapes, row ranges): nothing
is unpickled, and a malformed message raises DistributedError naming its sender.
"""
from __future__ import annotations

import math

import numpy as np

from . import ps_state, wire
from ..eager.context import no_grad
from ..errors import ArgumentError, DistributedError
from ..ops.creation import tensor
from ..ops.sparse_rows import SparseRows
from .collectives import _name, wait_until
from .roles import expect_serve, ps_only, served, worker_only
from .world import world
from ..ops.methods import assign
from ..nn.linear import Embedding
from ..nn.parameter import Parameter
from ..tensor import Tensor

REQUEST, REPLY = 11, 12  # MPI tags; the messages themselves are wire.py's typed buffers


class ParameterServer:
    def __init__(self, model, optimizer, *, mode: str = "async", backup_workers: int = 0):
        self.world = w = world()
        if w.num_ps < 1 or w.comm is None:
            raise DistributedError("ParameterServer needs ps ranks: launch with rill-launch "
                                   "--ps P", op="ParameterServer")
        if mode not in ("async", "sync"):
            raise ArgumentError(f"mode must be 'async' or 'sync', got {mode!r}",
                                op="ParameterServer")
        n = len(w.worker_ranks)
        if not 0 <= backup_workers < n or (backup_workers and mode != "sync"):
            raise ArgumentError(f"backup_workers={backup_workers} needs mode='sync' and fewer "
                                f"than the {n} workers", op="ParameterServer")
        self.model, self.optimizer = model, optimizer
        self.mode, self.backup = mode, backup_workers
        self.params = dict(model.named_parameters())
        self.place, self.ranges = _placement(model, self.params, w.num_ps)
        self.step = 0
        self.stats = {"applied": 0, "dropped": 0, "pushes": 0}
        self.restored = None  # the global step of the checkpoint this ps restored
        if w.role == "ps":
            expect_serve(w, "dist.ParameterServer(...)", "ps.serve()")
        else:
            ps_state.refuse_on_worker(optimizer)

    def _worker_only(self, api: str) -> None:
        worker_only(self.world, f"ParameterServer.{api}", "ps.serve()")

    # ---- worker side -----------------------------------------------------------------------

    def pull(self, rows: dict | None = None) -> None:
        """Copy the current values of the variables into the model. Embedding tables are
        fetched only as rows: those named in `rows` ({table name: indices}); a table not
        named there is not fetched."""
        self._worker_only("pull")
        rows = {k: np.unique(np.asarray(v.numpy() if hasattr(v, "numpy") else v).reshape(-1))
                for k, v in (rows or {}).items()}
        for name in rows:
            if name not in self.ranges:
                raise ArgumentError(f"rows= names {name!r}, which is not an embedding table "
                                    f"split over the ps (tables: {sorted(self.ranges)})",
                                    op="ParameterServer.pull")
        for k in self.world.ps_ranks:
            want_rows = {name: idx[(idx >= lo) & (idx < hi)]
                         for name, idx in rows.items() for lo, hi in [self.ranges[name][k]]}
            dense = [n for n, owner in self.place.items() if owner == k]
            self._send("pull", self.step, {n: None for n in dense},
                       {n: (idx, None) for n, idx in want_rows.items()}, k)
        with no_grad():
            for k in self.world.ps_ranks:
                reply = self._recv(k, REPLY, "pull")
                self.step = max(self.step, reply["step"])
                for name, value in reply["dense"].items():
                    _set(self.params[name], value)
                for name, (idx, values) in reply["rows"].items():
                    _set_rows(self.params[name], idx, values)

    def push(self) -> None:
        """Send each variable's .grad to the ps that owns it (sparse rows to their owners)."""
        self._worker_only("push")
        for k in self.world.ps_ranks:
            dense, sparse = {}, {}
            for name, p in self.params.items():
                g = p.grad
                if g is None:
                    continue
                if name in self.ranges:
                    lo, hi = self.ranges[name][k]
                    if isinstance(g, SparseRows):
                        idx, vals = g.indices.numpy().reshape(-1), g.rows.numpy()
                        vals = vals.reshape(len(idx), -1)
                    else:
                        idx = np.arange(p.shape[0])
                        vals = g.numpy()
                    keep = (idx >= lo) & (idx < hi)
                    sparse[name] = (idx[keep], vals[keep])
                elif self.place[name] == k:
                    dense[name] = (g.to_dense() if isinstance(g, SparseRows) else g).numpy()
            self._send("push", self.step, dense, sparse, k)
        self.step += 1

    def backward(self, loss) -> None:
        """Gradients of loss into .grad (cleared first), then pushed."""
        self._worker_only("backward")
        for p in self.params.values():
            p.grad = None
        loss.backward()
        self.push()

    def close(self) -> None:
        """This worker is done; serve() returns on the ps once every worker has closed."""
        self._worker_only("close")
        for k in self.world.ps_ranks:
            self._send("close", 0, {}, {}, k)

    # ---- checkpoints (ps_state.py) ---------------------------------------------------------

    def state_dict(self) -> dict:
        """The job's training state: {"step", "ps_steps", "model", "optimizer"}. On a worker,
        gathered from every ps (in sync mode once the step this worker pushed for is
        applied); on a ps rank, its own view (its variables current, the others as built)."""
        w = self.world
        if w.role == "ps":
            shares = {k: ps_state.own_share(self) if k == w.rank else
                      _as_built(self, k) for k in w.ps_ranks}
            return ps_state.assemble(self, shares, {k: self.step for k in w.ps_ranks})
        for k in w.ps_ranks:
            self._post("state", self.step, [], k)
        shares, steps = {}, {}
        for k in w.ps_ranks:
            shares[k], steps[k] = self._recv(k, REPLY, "state")
        return ps_state.assemble(self, shares, steps)

    def load_state_dict(self, state: dict) -> None:
        """Resume from `state` (from state_dict()): on a worker, the model's values and the
        global step here, and each ps's share sent to it; on a ps rank, its own share."""
        w = self.world
        shares = {k: ps_state.share_for(self, state, k) for k in w.ps_ranks}
        steps = list(state["ps_steps"])
        if len(steps) != len(w.ps_ranks):
            raise ArgumentError(f"the state is of a job with {len(steps)} parameter servers, "
                                f"this one has {len(w.ps_ranks)}",
                                op="ParameterServer.load_state_dict")
        if w.role == "ps":
            self._restore({"op": "snapshot", "step": int(steps[w.rank]),
                           "share": shares[w.rank]}, w.rank)
            return
        with no_grad():
            for name, value in state["model"].items():
                _set(self.params[name], value.numpy() if hasattr(value, "numpy") else value)
        self.step = int(state["step"])
        for k in w.ps_ranks:
            self._post("snapshot", int(steps[k]), ps_state.to_entries(self, shares[k], k), k)

    def _restore(self, msg, source) -> None:
        """Apply a restore on this ps: once before its first step; the same checkpoint again
        is skipped; another after steps were applied is refused."""
        if msg["step"] == self.restored:
            return
        if self.stats["applied"]:
            raise DistributedError(
                f"rank {source} ({_name(self.world, source)}) restores a checkpoint of step "
                f"{msg['step']} on {self.world.name}, which has applied {self.stats['applied']}"
                " steps since it started: every worker restores before its first pull",
                op="ParameterServer.load_state_dict")
        ps_state.apply_share(self, msg["share"], msg["step"])
        self.restored = msg["step"]

    # ---- ps side ---------------------------------------------------------------------------

    def serve(self) -> dict:
        """Answer pulls and apply pushes until every worker has closed; returns counts:
        applied (optimizer steps), pushes (received), dropped (stale, in sync mode)."""
        w = self.world
        ps_only(w, "ParameterServer.serve")
        served(w)
        n = len(w.worker_ranks)
        open_workers = set(w.worker_ranks)
        waiting: list = []   # pulls asking for a step not applied yet (sync)
        arrived: list = []   # pushes for the current step (sync)
        while open_workers:
            msg, source = self._recv_any()
            if msg["op"] == "close":
                open_workers.discard(source)
            elif msg["op"] == "snapshot":
                self._restore(msg, source)
            elif msg["op"] in ("pull", "state"):
                if self.mode == "sync" and msg["step"] > self.step:
                    waiting.append((msg, source))
                else:
                    self._answer(msg, source)
            else:
                self.stats["pushes"] += 1
                if self.mode == "async":
                    self._apply([msg])
                elif msg["step"] < self.step:
                    self.stats["dropped"] += 1   # a backup worker's late gradient
                else:
                    arrived.append(msg)
                    if len(arrived) >= n - self.backup:
                        self._apply(arrived)
                        arrived = []
                        ready = [(m, s) for m, s in waiting if m["step"] <= self.step]
                        waiting = [(m, s) for m, s in waiting if m["step"] > self.step]
                        for m, s in ready:
                            self._answer(m, s)
        return dict(self.stats)

    def _answer(self, msg, worker) -> None:
        if msg["op"] == "state":
            entries = ps_state.to_entries(self, ps_state.own_share(self), self.world.rank)
            self._post("snapshot", self.step, entries, worker, REPLY)
            return
        dense = {name: self.params[name].numpy() for name in msg["dense"]}
        rows = {name: (idx, self.params[name].numpy()[idx])
                for name, (idx, _) in msg["rows"].items()}
        self._send("reply", self.step, dense, rows, worker, REPLY)

    def _apply(self, pushes) -> None:
        """The mean of these pushes' gradients as .grad of the variables here; one step."""
        grads: dict = {}
        for msg in pushes:
            for name, g in msg["dense"].items():
                grads.setdefault(name, []).append(g)
        for p in self.params.values():
            p.grad = None
        for name, gs in grads.items():
            p = self.params[name]
            p.grad = tensor(np.mean(gs, axis=0), dtype=p.dtype)
        sparse: dict = {}
        for msg in pushes:
            for name, (idx, vals) in msg["rows"].items():
                sparse.setdefault(name, []).append((idx, vals))
        self.optimizer.step()
        for name, parts in sparse.items():
            p = self.params[name]
            idx = np.concatenate([i for i, _ in parts]).astype(np.int64)
            vals = np.concatenate([v for _, v in parts]).reshape((len(idx),) + p.shape[1:])
            rows, where = np.unique(idx, return_inverse=True)
            summed = np.zeros((len(rows),) + p.shape[1:], np.float64)
            np.add.at(summed, where, vals)
            if len(rows):
                self._apply_rows(p, rows, summed / len(pushes))
        self.step += 1
        self.stats["applied"] += 1

    def _apply_rows(self, table, rows, grad) -> None:
        """One optimizer step on these rows of a table only, in place: a row-sized copy of
        the table and of its optimizer slots takes the step, and is written back. Copying a
        1 GB table to update 32 rows would cost more than the exchange itself. For optimizers
        with slots this is the lazy sparse update (rows not looked up keep their slots as
        they are), as parameter servers do."""
        opt = self.optimizer
        group = next(g for g in opt.param_groups if any(q is table for q in g["params"]))
        part = Parameter(tensor(table.numpy()[rows], dtype=table.dtype))
        slots = opt.state.get(table)
        if slots is not None:
            opt.state[part] = {k: tensor(v.numpy()[rows], dtype=v.dtype)
                               if isinstance(v, Tensor) and v.shape == table.shape else v
                               for k, v in slots.items()}
        part.grad = tensor(grad, dtype=table.dtype)
        with no_grad():
            opt.update_group({**group, "params": [part]})
        _set_rows(table, rows, part.numpy())
        new = opt.state.pop(part, None)
        if new:
            slots = opt.state.setdefault(table, {})
            for k, v in new.items():
                if isinstance(v, Tensor) and v.shape == part.shape:
                    if k not in slots:  # made at this first step: full size, zero elsewhere
                        from ..ops.creation import zeros
                        slots[k] = zeros(*table.shape, dtype=v.dtype)
                    _set_rows(slots[k], rows, v.numpy())
                else:
                    slots[k] = v

    # ---- messages ------------------------------------------------------------------------
    # A message is {"op", "step", "dense": {name: array}, "rows": {name: (indices, rows)}}
    # in memory (a pull's arrays are None: it names what it wants), and wire.py's typed
    # buffer between ranks. A received one is checked against this rank's variables before
    # anything reads it.

    def _send(self, kind: str, step: int, dense: dict, rows: dict, dest: int,
              tag: int = REQUEST) -> None:
        entries = [("wanted" if v is None else "value", name, _NOTHING if v is None else v)
                   for name, v in dense.items()]
        for name, (idx, vals) in rows.items():
            entries.append(("indices", name, np.asarray(idx, np.int64)))
            if vals is not None:
                entries.append(("rows", name, vals))
        self._post(kind, step, entries, dest, tag)

    def _post(self, kind: str, step: int, entries: list, dest: int, tag: int = REQUEST):
        from mpi4py import MPI
        w = self.world
        if w.board is not None:
            w.board.note("push" if kind == "push" else "send", collective=False)
        buffer = wire.encode(kind, step, entries)
        request = w.comm.Isend([buffer, MPI.BYTE], dest, tag)
        self._wait(request.Test, f"send to rank {dest}", [dest])

    def _recv(self, source: int, tag: int, what: str):
        """A reply from source: the message as a dict, or for a "state" request (its
        share, the ps's step)."""
        w = self.world
        if w.board is not None:
            w.board.note("pull" if what == "pull" else "recv", collective=False)
        msg, _ = self._receive(source, tag, f"{what} from rank {source}", [source])
        if what == "state":
            if msg["op"] != "snapshot":
                raise DistributedError(f"rank {source} answered a state request with a "
                                       f"{msg['op']}", op="ParameterServer")
            return msg["share"], msg["step"]
        return msg

    def _recv_any(self):
        from mpi4py import MPI
        return self._receive(MPI.ANY_SOURCE, REQUEST, "serve (waiting for any worker)",
                             self.world.worker_ranks)

    def _receive(self, source: int, tag: int, what: str, peers) -> tuple[dict, int]:
        """(the checked message, its sender) of the first message from source with tag."""
        from mpi4py import MPI
        w = self.world
        status = MPI.Status()
        found = []
        self._wait(lambda: found.append(w.comm.Improbe(source, tag, status))
                   or found[-1] is not None, what, peers)
        sender = status.Get_source()
        who = f"rank {sender} ({_name(w, sender)})"
        buffer = bytearray(status.Get_count(MPI.BYTE))
        found[-1].Recv([buffer, MPI.BYTE])
        message = wire.decode(buffer, who)
        owner = w.rank if tag == REQUEST else sender
        if message.kind == "snapshot":
            # a ps's share: its answer to a state request, or a restore sent to a ps
            return {"op": "snapshot", "step": message.step,
                    "share": ps_state.checked(self, message, owner, who)}, sender
        expected = ("reply",) if tag == REPLY else ("pull", "push", "close", "state")
        msg = self._checked(message, expected, owner, who)
        return msg, sender

    def _checked(self, message, expected, owner: int, who: str) -> dict:
        """The message as a dict, once every name, shape and index in it has been checked
        against the variables ps `owner` holds."""
        def refuse(why):
            return DistributedError(f"malformed message from {who}: {why}; refused",
                                    op="ParameterServer")

        kind = message.kind
        if kind not in expected:
            raise refuse(f"a {kind} where a {' or '.join(expected)} was expected")
        fields: dict = {"value": {}, "wanted": {}, "indices": {}, "rows": {}}
        for field, name, array in message.entries:
            if field not in fields:  # the wire allows it in this kind; this strategy not
                raise refuse(f"a {field} entry ({name!r}) in a {kind}")
            fields[field][name] = array
        dense = {**{n: None for n in fields["wanted"]}, **fields["value"]}
        if kind != "pull" and set(fields["indices"]) != set(fields["rows"]):
            raise refuse(f"row indices name the tables {sorted(fields['indices'])}, rows "
                         f"{sorted(fields['rows'])}")
        for name, value in dense.items():
            if self.place.get(name) != owner:
                raise refuse(f"{name!r} is not a variable held by ps{owner}")
            shape = self.params[name].shape
            if value is None and fields["wanted"][name].size or \
                    value is not None and value.shape != shape:
                raise refuse(f"{name!r} has shape {value.shape if value is not None else ()}"
                             f", the variable {shape}")
        rows = {}
        for name, idx in fields["indices"].items():
            if name not in self.ranges:
                raise refuse(f"{name!r} is not an embedding table split over the ps")
            lo, hi = self.ranges[name][owner]
            if idx.ndim != 1 or idx.dtype != np.int64 or idx.size and (idx.min() < lo or
                                                                      idx.max() >= hi):
                raise refuse(f"the row indices of {name!r} are not int64 in [{lo}, {hi})")
            vals = fields["rows"].get(name)
            width = math.prod(self.params[name].shape[1:])
            if vals is not None and (vals.ndim < 1 or vals.shape[0] != len(idx) or
                                     vals.size != len(idx) * width):
                raise refuse(f"{len(idx)} rows of {name!r} have shape {vals.shape}")
            rows[name] = (idx, vals)
        return {"op": kind, "step": message.step, "dense": dense, "rows": rows}

    def _wait(self, done, what: str, peers) -> None:
        wait_until(done, self.world, what, peers)


_NOTHING = np.zeros(0, np.uint8)  # the array of a "wanted" entry: the name is the request


def _set(p, value) -> None:
    assign(p, tensor(value, dtype=p.dtype, device=p.device))


def _set_rows(p, idx, values) -> None:
    """Write rows of a table in place. An exception to rill's value semantics, on purpose:
    copying a large table to change 32 rows would cost more than the whole exchange. The
    table's own buffer is written (made private first if it is shared or read-only), and
    its version moves, so a tape that saved the old value refuses a stale backward."""
    data = p._data
    if not isinstance(data, np.ndarray) or not data.flags.writeable or data.base is not None:
        data = np.array(p.numpy(), dtype=p.dtype.storage)
        p._data = data
    data[idx] = values
    p._version += 1


def _placement(model, params: dict, num_ps: int):
    """({name: ps rank} for whole variables, {name: [(lo, hi) per ps]} for tables by rows)."""
    tables = {f"{prefix}.weight" if prefix else "weight"
              for prefix, m in model.named_modules() if isinstance(m, Embedding)}
    ranges: dict = {}
    for name in tables & set(params):
        rows = params[name].shape[0]
        cuts = [rows * k // num_ps for k in range(num_ps + 1)]
        ranges[name] = [(cuts[k], cuts[k + 1]) for k in range(num_ps)]
    load = [0] * num_ps
    place: dict = {}
    for name in sorted((n for n in params if n not in ranges), key=lambda n: -params[n].size):
        k = load.index(min(load))
        place[name] = k
        load[k] += params[name].size
    return place, ranges


def _as_built(ps, k: int) -> dict:
    """Another ps's share as this ps sees it: the values it was built with, no slots."""
    share: dict = {"dense": {}, "rows": {}, "slots": {}}
    for name, p in ps.params.items():
        if name in ps.ranges:
            lo, hi = ps.ranges[name][k]
            share["rows"][name] = p.numpy()[lo:hi]
        elif ps.place[name] == k:
            share["dense"][name] = p.numpy()
    return share
