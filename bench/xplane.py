"""XSpace decoding: the hand-written wire decoder against the ``protobuf`` package (upb), on one input.

``python -m bench.xplane [FILE.xplane.pb] [--kernels N]``: without a file, a synthetic space of N
kernels and N launches (``tests/xplane_bytes.synthetic``). protobuf is not a gaplens dependency:
this builds the ``xplane.proto`` descriptor at runtime (no protoc) when the package is installed,
parses with it, and pulls the same columns the loader needs (event metadata id, offset, duration,
aggregate flag, and every stat flat), so both sides do the same work. README (Dependencies) keeps
the numbers that decided.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gaplens.loaders.xplane.wire import decode


def _messages():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="gaplens_xplane.proto", package="gx", syntax="proto3")

    def msg(name, fields, nested=()):
        m = fd.message_type.add(name=name)
        for n in nested:
            m.nested_type.append(n)
        for fname, num, typ, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=typ, label=label)
            if tname:
                f.type_name = tname
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def entry(name, value_type):
        e = descriptor_pb2.DescriptorProto(name=name)
        e.options.map_entry = True
        e.field.add(name="key", number=1, type=F.TYPE_INT64, label=opt)
        e.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=opt, type_name=value_type)
        return e

    msg(
        "XSpace",
        [
            ("planes", 1, F.TYPE_MESSAGE, rep, ".gx.XPlane"),
            ("errors", 2, F.TYPE_STRING, rep, ""),
            ("warnings", 3, F.TYPE_STRING, rep, ""),
            ("hostnames", 4, F.TYPE_STRING, rep, ""),
        ],
    )
    msg(
        "XPlane",
        [
            ("id", 1, F.TYPE_INT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("lines", 3, F.TYPE_MESSAGE, rep, ".gx.XLine"),
            ("event_metadata", 4, F.TYPE_MESSAGE, rep, ".gx.XPlane.EventMetadataEntry"),
            ("stat_metadata", 5, F.TYPE_MESSAGE, rep, ".gx.XPlane.StatMetadataEntry"),
            ("stats", 6, F.TYPE_MESSAGE, rep, ".gx.XStat"),
        ],
        nested=[entry("EventMetadataEntry", ".gx.XEventMetadata"), entry("StatMetadataEntry", ".gx.XStatMetadata")],
    )
    msg(
        "XLine",
        [
            ("id", 1, F.TYPE_INT64, opt, ""),
            ("display_id", 10, F.TYPE_INT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("display_name", 11, F.TYPE_STRING, opt, ""),
            ("timestamp_ns", 3, F.TYPE_INT64, opt, ""),
            ("duration_ps", 9, F.TYPE_INT64, opt, ""),
            ("events", 4, F.TYPE_MESSAGE, rep, ".gx.XEvent"),
        ],
    )
    ev = msg(
        "XEvent",
        [
            ("metadata_id", 1, F.TYPE_INT64, opt, ""),
            ("offset_ps", 2, F.TYPE_INT64, opt, ""),
            ("num_occurrences", 5, F.TYPE_INT64, opt, ""),
            ("duration_ps", 3, F.TYPE_INT64, opt, ""),
            ("stats", 4, F.TYPE_MESSAGE, rep, ".gx.XStat"),
        ],
    )
    ev.oneof_decl.add(name="data")
    ev.field[1].oneof_index = 0
    ev.field[2].oneof_index = 0
    st = msg(
        "XStat",
        [
            ("metadata_id", 1, F.TYPE_INT64, opt, ""),
            ("double_value", 2, F.TYPE_DOUBLE, opt, ""),
            ("uint64_value", 3, F.TYPE_UINT64, opt, ""),
            ("int64_value", 4, F.TYPE_INT64, opt, ""),
            ("str_value", 5, F.TYPE_STRING, opt, ""),
            ("bytes_value", 6, F.TYPE_BYTES, opt, ""),
            ("ref_value", 7, F.TYPE_UINT64, opt, ""),
        ],
    )
    st.oneof_decl.add(name="value")
    for f in st.field[1:]:
        f.oneof_index = 0
    msg(
        "XEventMetadata",
        [
            ("id", 1, F.TYPE_INT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("display_name", 4, F.TYPE_STRING, opt, ""),
            ("metadata", 3, F.TYPE_BYTES, opt, ""),
            ("stats", 5, F.TYPE_MESSAGE, rep, ".gx.XStat"),
            ("child_id", 6, F.TYPE_INT64, rep, ""),
        ],
    )
    msg(
        "XStatMetadata",
        [
            ("id", 1, F.TYPE_INT64, opt, ""),
            ("name", 2, F.TYPE_STRING, opt, ""),
            ("description", 3, F.TYPE_STRING, opt, ""),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gx.XSpace"))


def with_protobuf(data: bytes) -> int:
    """Parse with upb and pull the loader's columns; returns the number of events (to check both agree)."""
    space = _messages()()
    space.ParseFromString(data)
    n = 0
    for plane in space.planes:
        {k: v.name for k, v in plane.event_metadata.items()}
        {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            mids, offs, durs, aggs = [], [], [], []
            s_ev, s_id, s_val = [], [], []
            for i, e in enumerate(line.events):
                mids.append(e.metadata_id)
                offs.append(e.offset_ps)
                durs.append(e.duration_ps)
                aggs.append(e.num_occurrences != 0)
                for s in e.stats:
                    s_ev.append(i)
                    s_id.append(s.metadata_id)
                    which = s.WhichOneof("value")
                    s_val.append(getattr(s, which) if which else None)
            np.asarray(mids, np.int64), np.asarray(offs, np.int64), np.asarray(durs, np.int64)
            n += len(mids)
    return n


def with_wire(data: bytes) -> int:
    return sum(len(plane.events.metadata_id) for plane in decode(data).planes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.xplane", description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--kernels", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.file:
        with open(args.file, "rb") as fh:
            data = fh.read()
    else:
        from tests.xplane_bytes import synthetic

        data = synthetic(args.kernels)
    print(f"{len(data) / 1e6:.1f} MB")
    runs = [("wire", with_wire)]
    try:
        _messages()
        runs.append(("protobuf", with_protobuf))
    except ImportError:
        print("protobuf is not installed: the wire decoder only")
    for label, fn in runs:
        best, n = float("inf"), 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            n = fn(data)
            best = min(best, time.perf_counter() - t)
        print(
            f"{label:<9} {n:>10,} events  best of {args.repeat}: {best:.3f} s  ({best / max(n, 1) * 1e6:.2f} us/event)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
