"""Test helpers: open a saved graph's JSON, change it as an attacker or a careless editor
would, and seal it again (recompute the checksums the manifest records), so that a test
reaches the loader's validation rather than stopping at the checksum."""
from __future__ import annotations

import hashlib
import json
import os


def graph_file(directory) -> str:
    """The path of the graph document inside a saved-graph directory."""
    manifest = os.path.join(directory, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return os.path.join(directory, json.load(f)["graph"]["file"])
    return os.path.join(directory, "graph.json")


def read_doc(directory) -> dict:
    with open(graph_file(directory)) as f:
        return json.load(f)


def write_text(directory, text: str) -> None:
    """Replace the graph document's text and re-seal the manifest's checksum for it."""
    path = graph_file(directory)
    with open(path, "w") as f:
        f.write(text)
    reseal(directory)


def write_doc(directory, doc) -> None:
    write_text(directory, json.dumps(doc))


def edit_doc(directory, edit) -> None:
    """edit(doc) changes the parsed document in place; the result is written and sealed."""
    doc = read_doc(directory)
    edit(doc)
    write_doc(directory, doc)


def reseal(directory) -> None:
    manifest = os.path.join(directory, "manifest.json")
    if not os.path.exists(manifest):
        return
    with open(manifest) as f:
        doc = json.load(f)
    for part in ("graph", "state"):
        with open(os.path.join(directory, doc[part]["file"]), "rb") as f:
            doc[part]["sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(manifest, "w") as f:
        json.dump(doc, f)


def first(doc) -> dict:
    """The first saved variant: its signature, result, variables, nodes and outputs."""
    return doc["variants"][0]


def nodes_of(doc, op):
    return [n for n in first(doc)["nodes"] if n["op"] == op]
