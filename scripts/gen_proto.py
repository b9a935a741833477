"""Regenerate the Python protobuf modules in strom/rpc/gen from strom/rpc/proto.

Usage:
    .venv/bin/python scripts/gen_proto.py
    .venv/bin/python scripts/gen_proto.py --check-fluss /tmp/FlussApi.proto

The second form also compiles an upstream FlussApi.proto (e.g. extracted with
`git -C /work/.mirror/apache+fluss/repo show HEAD:fluss-rpc/src/main/proto/FlussApi.proto`)
and fails if any message we define differs from it in a way that matters on the wire.
Needs grpcio-tools (the project's `dev` extra); only message code is generated, no gRPC stubs.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "strom" / "rpc" / "proto"
GEN_DIR = ROOT / "strom" / "rpc" / "gen"
PROTOS = ("fluss_api.proto", "strom_internal.proto")
FLUSS_PROTO = "fluss_api.proto"
# Strom-only fields of Fluss messages use numbers from here up (strom/rpc/proto/README.md)
STROM_EXTENSIONS = 1000

# pyproject allows protobuf>=6.31,<7; generated code refuses runtimes older than the protoc that made it.
RUNTIME_MAJOR = 6
RUNTIME_LINE = re.compile(
    r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+)"
)


def run_protoc(args: list[str]) -> None:
    # grpc_tools.protoc.main takes argv including a program name; our protos import no well-known types.
    code = protoc.main(["protoc", *args])
    if code != 0:
        raise SystemExit(f"protoc failed ({code}): {' '.join(args)}")


def generate() -> None:
    GEN_DIR.mkdir(parents=True, exist_ok=True)
    run_protoc(
        [
            f"--proto_path={PROTO_DIR}",
            f"--python_out={GEN_DIR}",
            f"--pyi_out={GEN_DIR}",
            *(str(PROTO_DIR / name) for name in PROTOS),
        ]
    )
    for name in PROTOS:
        module = GEN_DIR / (Path(name).stem + "_pb2.py")
        text = module.read_text()
        match = RUNTIME_LINE.search(text)
        if match is None:
            raise SystemExit(f"{module}: no runtime version check found; unexpected protoc output")
        major, minor, patch = (int(g) for g in match.groups())
        if major != RUNTIME_MAJOR:
            raise SystemExit(
                f"{module}: generated for protobuf {major}.x, the project needs {RUNTIME_MAJOR}.x"
            )
        # The files import nothing of ours; a sibling import would break `strom.rpc.gen.X` imports.
        if re.search(r"^import \w+_pb2", text, re.MULTILINE):
            raise SystemExit(f"{module}: unexpected cross-import between generated modules")
        print(f"wrote {module.relative_to(ROOT)} (needs protobuf runtime >= {major}.{minor}.{patch})")


def descriptor_set(proto_dir: Path, proto_name: str) -> descriptor_pb2.FileDescriptorProto:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        run_protoc([f"--proto_path={proto_dir}", f"--descriptor_set_out={out}", str(proto_dir / proto_name)])
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return fds.file[0]


def wire_shape(message: descriptor_pb2.DescriptorProto) -> dict[int, tuple[str, int, int, str, bool]]:
    """Number -> (name, label, type, short type name, packed): everything that defines the contract."""
    shape = {}
    for field in message.field:
        short_type = field.type_name.rsplit(".", 1)[-1]
        packed = field.options.packed if field.options.HasField("packed") else False
        shape[field.number] = (field.name, field.label, field.type, short_type, packed)
    return shape


def check_against_fluss(upstream: Path) -> int:
    ours = {m.name: m for m in descriptor_set(PROTO_DIR, FLUSS_PROTO).message_type}
    theirs = {m.name: m for m in descriptor_set(upstream.parent, upstream.name).message_type}
    problems = []
    extensions: list[str] = []
    for name, message in ours.items():
        if name not in theirs:
            problems.append(f"{name}: not in upstream")
            continue
        mine, fluss = wire_shape(message), wire_shape(theirs[name])
        for number in sorted(n for n in mine.keys() - fluss.keys() if n >= STROM_EXTENSIONS):
            extensions.append(f"{name}.{mine.pop(number)[0]} = {number}")
        for number in sorted(mine.keys() | fluss.keys()):
            if mine.get(number) != fluss.get(number):
                problems.append(
                    f"{name} field {number}: ours {mine.get(number)} upstream {fluss.get(number)}"
                )
    for problem in problems:
        print(problem, file=sys.stderr)
    skipped = sorted(theirs.keys() - ours.keys())
    print(f"checked {len(ours)} messages against {upstream}: {len(problems)} differences")
    print(f"Strom extensions ({len(extensions)}): {', '.join(extensions)}")
    print(f"upstream messages we do not define ({len(skipped)}): {', '.join(skipped)}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check-fluss", type=Path, metavar="FLUSS_API_PROTO", help="upstream proto to compare"
    )
    args = parser.parse_args()
    generate()
    if args.check_fluss is not None:
        return check_against_fluss(args.check_fluss.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
