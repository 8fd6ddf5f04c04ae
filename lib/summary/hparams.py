"""The hyper-parameter plugin's three summaries (plugins/hparams/api.proto,
plugin_data.proto), encoded by hand.

An HParamsPluginData (version 1, and one of experiment 2, session_start_info 3,
session_end_info 4) sits in the plugin content of the summary's metadata; the summary's
tensor is an empty float tensor, as the plugin's own writer leaves it. One run is one
"session": the experiment says which hyper-parameters and metrics exist, the session start
gives this run's values, the session end marks it finished.
"""
from __future__ import annotations

import numpy as np

from . import messages
from . import protobuf as pb

EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"
_STRING, _BOOL, _FLOAT64 = 1, 2, 3  # HParamInfo.type
_STATUS_SUCCESS = 1
_EMPTY = messages.tensor_proto(np.zeros((0,), np.float32))


def proto_value(value) -> bytes:
    """google.protobuf.Value: number_value 2, string_value 3, bool_value 4."""
    if isinstance(value, bool):
        return pb.uint(4, value, keep=True)
    if isinstance(value, str):
        return pb.blob(3, value, keep=True)
    return pb.double(2, float(value), keep=True)


def kind(value) -> int:
    return _BOOL if isinstance(value, bool) else _STRING if isinstance(value, str) else _FLOAT64


def _plugin_value(tag: str, field: int, data: bytes) -> bytes:
    content = pb.message(field, data)  # version 0 is the default: not written
    return messages.value(tag, metadata=messages.summary_metadata("hparams", content),
                          tensor=_EMPTY)


def experiment(hparams: dict, metric_tags, domains: dict) -> bytes:
    """Experiment: hparam_infos 4 (name 1, type 4, domain_discrete 5), metric_infos 5
    (name 1: MetricName, its tag 2)."""
    infos = b""
    for name, value in hparams.items():
        info = pb.blob(1, name) + pb.uint(4, kind(value))
        if name in domains:
            info += pb.message(5, b"".join(pb.message(1, proto_value(v))
                                           for v in domains[name]))
        infos += pb.message(4, info)
    metrics = b"".join(pb.message(5, pb.message(1, pb.blob(2, tag))) for tag in metric_tags)
    return _plugin_value(EXPERIMENT_TAG, 2, infos + metrics)


def session_start(hparams: dict, group_name: str, start_time: float) -> bytes:
    """SessionStartInfo: hparams 1 (map<string, Value>), group_name 4, start_time_secs 5."""
    entries = b"".join(pb.message(1, pb.blob(1, name) + pb.message(2, proto_value(value)))
                       for name, value in hparams.items())
    return _plugin_value(SESSION_START_TAG, 3,
                         entries + pb.blob(4, group_name) + pb.double(5, start_time))


def session_end(end_time: float) -> bytes:
    """SessionEndInfo: status 1, end_time_secs 2."""
    return _plugin_value(SESSION_END_TAG, 4,
                         pb.uint(1, _STATUS_SUCCESS) + pb.double(2, end_time))
