"""state_dict files across C++ (torchbus::save_state_dict / load_state_dict) and Python PyTorch.

Run by ctest with Debian's /usr/bin/python3 (python3-torch, the same PyTorch 1.13 as LibTorch):
  C++ -> file -> Python: torch.load gives a plain dict with the exact values the C++ side set,
      loaded by the same network in Python with strict=True;
  Python -> file -> C++: a file of torch.save(model.state_dict()) loads with the exact values;
  Python -> C++ -> Python: random weights come back bit for bit;
  bad files: one clear message naming the file (missing, unexpected, shape, dtype, truncated,
      a flipped bit that Python's zipfile finds by its CRC-32 too, TorchScript archive, not a dict
      of str -> tensor, legacy format); a file without CRC-32s (set_crc32_options(False)) loads.
"""

import argparse
import collections
import contextlib
import os
import struct
import subprocess
import sys
import warnings
import zipfile

import torch
from torch import nn


def network():
    # The network of state_dict_tool.cpp.
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))


def pattern(like, k, salt):
    # The values of state_dict_tool.cpp's pattern().
    if like.dtype == torch.int64:
        return torch.full_like(like, 1000 + k + salt)
    index = torch.arange(like.numel(), dtype=torch.int64)
    return ((index * 37 + k * 11 + salt).remainder(101) - 50).to(like.dtype).div(64).reshape(like.shape)


def patterned(salt):
    state = network().state_dict()
    names = sorted(state)
    return {name: pattern(tensor, names.index(name), salt) for name, tensor in state.items()}


@contextlib.contextmanager
def parameters_pickled_with_state():
    """nn.Parameter pickled as PyTorch 2.x pickles one with attributes, under a PyTorch without
    torch._utils._rebuild_parameter_with_state (1.13); as it is where PyTorch has it."""
    if hasattr(torch._utils, "_rebuild_parameter_with_state"):
        yield
        return

    def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
        parameter = nn.Parameter(data, requires_grad)
        parameter.__dict__.update(state)
        return parameter

    _rebuild_parameter_with_state.__module__ = "torch._utils"
    _rebuild_parameter_with_state.__qualname__ = "_rebuild_parameter_with_state"
    torch._utils._rebuild_parameter_with_state = _rebuild_parameter_with_state
    reduce = nn.Parameter.__reduce_ex__
    nn.Parameter.__reduce_ex__ = lambda self, protocol: (
        _rebuild_parameter_with_state,
        (self.data, self.requires_grad, collections.OrderedDict(), self.__dict__))
    try:
        yield
    finally:
        nn.Parameter.__reduce_ex__ = reduce
        del torch._utils._rebuild_parameter_with_state


class Checks:
    def __init__(self, tool, work):
        self.tool = tool
        self.work = work
        self.failures = []
        self.bad_files = []  # (path, parts of the message, loaded with --lax)

    def path(self, name):
        return os.path.join(self.work, name)

    def check(self, condition, what):
        print(("ok   " if condition else "FAIL ") + what)
        if not condition:
            self.failures.append(what)

    def run_tool(self, *args):
        return subprocess.run([self.tool, *args], capture_output=True, text=True, timeout=60)

    def cpp_to_python(self):
        path = self.path("from_cpp.pt")
        result = self.run_tool("save", path)
        self.check(result.returncode == 0, "C++ saves a state_dict: " + result.stderr)
        loaded = torch.load(path)
        self.check(type(loaded) is dict, "torch.load returns a plain dict, got %s" % type(loaded))
        expected = patterned(0)
        self.check(set(loaded) == set(expected), "names as Python's: %s" % sorted(loaded))
        for name, tensor in expected.items():
            got = loaded.get(name)
            self.check(got is not None and got.dtype == tensor.dtype and torch.equal(got, tensor),
                       "C++ -> Python bit-equal %s (%s)" % (name, tensor.dtype))
        model = network()
        result = model.load_state_dict(loaded, strict=True)
        self.check(not result.missing_keys and not result.unexpected_keys,
                   "the same network in Python loads it with strict=True")

    def python_to_cpp(self):
        model = network()
        model.load_state_dict(patterned(5))
        path = self.path("from_python.pt")
        torch.save(model.state_dict(), path)
        result = self.run_tool("expect", path)
        self.check(result.returncode == 0, "Python -> C++ bit-equal: " + result.stderr)

    def random_round_trip(self):
        torch.manual_seed(3)
        model = network()
        model.train()
        model(torch.randn(8, 4))  # running statistics and num_batches_tracked move
        source, back = self.path("random.pt"), self.path("random_back.pt")
        torch.save(model.state_dict(), source)
        result = self.run_tool("resave", source, back)
        self.check(result.returncode == 0, "C++ loads and saves random weights: " + result.stderr)
        returned = torch.load(back)
        for name, tensor in model.state_dict().items():
            self.check(torch.equal(returned[name], tensor),
                       "Python -> C++ -> Python bit-equal %s" % name)

    def rejected(self, name, write, parts, lax=False):
        """Writes the file `name` with write(path); checked by check_rejected()."""
        path = self.path(name)
        write(path)
        self.bad_files.append((path, parts, lax))

    def check_rejected(self):
        """Loads every bad file in one run of the tool: each is refused naming it and `parts`."""
        for lax in (False, True):
            files = [entry for entry in self.bad_files if entry[2] == lax]
            result = self.run_tool("load", *(["--lax"] if lax else []),
                                   *(path for path, _, _ in files))
            lines = result.stdout.splitlines()
            self.check(result.returncode == 0 and len(lines) == len(files),
                       "the tool reports on every bad file: " + result.stderr)
            for (path, parts, _), line in zip(files, lines):
                self.check(line.startswith(path + ": ") and not line.endswith(": ok")
                           and all(part in line for part in parts),
                           "%s refused naming the file and %s: %s"
                           % (os.path.basename(path), parts, line))

    def unrecorded_crcs(self):
        """A file whose records carry no CRC-32 (0: torch.save under
        torch.serialization.set_crc32_options(False), PyTorch 2.6 and later) loads."""
        model = network()
        model.load_state_dict(patterned(5))
        path = self.path("no_crc32.pt")
        if hasattr(torch.serialization, "set_crc32_options"):
            torch.serialization.set_crc32_options(False)
            try:
                torch.save(model.state_dict(), path)
            finally:
                torch.serialization.set_crc32_options(True)
        else:
            # This PyTorch always records them: write 0 into every central directory entry, where
            # a reader takes them from, as that option does.
            torch.save(model.state_dict(), path)
            with open(path, "rb") as file:
                data = bytearray(file.read())
            at = data.find(b"PK\x01\x02")
            while at >= 0:
                data[at + 16:at + 20] = bytes(4)
                at = data.find(b"PK\x01\x02", at + 4)
            with open(path, "wb") as file:
                file.write(bytes(data))
        with zipfile.ZipFile(path) as archive:
            self.check(all(info.CRC == 0 for info in archive.infolist()),
                       "no_crc32.pt records no CRC-32")
        result = self.run_tool("expect", path)
        self.check(result.returncode == 0, "a file without CRC-32s loads: " + result.stderr)

    def errors(self):
        good = patterned(5)

        def saving(value, **options):
            return lambda path: torch.save(value, path, **options)

        missing = dict(good)
        del missing["2.bias"]
        self.rejected("missing.pt", saving(missing), ["missing keys: 2.bias"])
        # A dict of one item (pickled with SETITEM, not SETITEMS) is read too.
        self.rejected("one_item.pt", saving({"0.weight": good["0.weight"]}),
                      ["missing keys: 0.bias, 1.weight"])
        extra = dict(good, **{"3.weight": torch.zeros(1)})
        self.rejected("extra.pt", saving(extra), ["unexpected keys: 3.weight"])
        wide = network()
        wide[2] = nn.Linear(3, 5)
        self.rejected("shape.pt", saving(wide.state_dict()),
                      ["size mismatch for 2.weight: [5, 3] in the file, [2, 3] in the model",
                       "size mismatch for 2.bias"])
        self.rejected("shape_lax.pt", saving(wide.state_dict()), ["size mismatch for 2.weight"],
                      lax=True)
        all_three = dict(wide.state_dict(), **{"3.weight": torch.zeros(1)})
        del all_three["0.bias"]
        self.rejected("all_three.pt", saving(all_three),
                      ["missing keys: 0.bias", "unexpected keys: 3.weight",
                       "size mismatch for 2.weight"])
        self.rejected("double.pt", saving(network().double().state_dict()),
                      ["dtype mismatch for 0.weight: Double in the file, Float in the model"])

        def truncated(path):
            torch.save(good, path)
            with open(path, "rb") as file:
                data = file.read()
            with open(path, "wb") as file:
                file.write(data[: len(data) // 2])

        self.rejected("truncated.pt", truncated, ["truncated or corrupt"])

        def short_record(path):
            # A well-formed zip whose first tensor's data record is shorter than its pickle says:
            # read as is, the tensor would reach past the record's memory.
            torch.save(good, path)
            with zipfile.ZipFile(path) as archive:
                entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
            with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
                for name, data in entries:
                    archive.writestr(name, data[:4] if name.endswith("/data/0") else data)

        self.rejected("short_record.pt", short_record,
                      ["'0.weight' has a storage of 48 bytes, but its data record holds 4"])
        def flipped(path):
            # One bit of the first tensor's data flipped in place: the zip's CRC-32 no longer
            # matches, which Python's zipfile (an independent reader) finds too.
            torch.save(good, path)
            with zipfile.ZipFile(path) as archive:
                info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
            with open(path, "r+b") as file:
                file.seek(info.header_offset + 26)
                name_length, extra_length = struct.unpack("<HH", file.read(4))
                at = info.header_offset + 30 + name_length + extra_length + 5
                file.seek(at)
                byte = file.read(1)
                file.seek(at)
                file.write(bytes([byte[0] ^ 0x01]))
            with zipfile.ZipFile(path) as archive:
                self.check(archive.testzip() == info.filename,
                           "Python's zipfile finds %s damaged" % info.filename)

        self.rejected("flipped.pt", flipped, ["record '", "/data/0' is damaged", "CRC-32"])

        def listed_twice(path):
            # A second record of the first tensor's name in other letter case: LibTorch's reader
            # finds names case-insensitively, so which of the two it reads is not defined.
            torch.save(good, path)
            with zipfile.ZipFile(path) as archive:
                entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zipfile warns of the duplicate name
                with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
                    for name, data in entries:
                        archive.writestr(name, data)
                        if name.endswith("/data/0"):
                            archive.writestr(name[: -len("data/0")] + "DATA/0", bytes(len(data)))

        self.rejected("twice.pt", listed_twice, ["/data/0' twice (letter case aside)"])
        self.rejected("torchscript.pt", lambda path: torch.jit.save(torch.jit.script(network()), path),
                      ["TorchScript archive"])
        self.rejected("list.pt", saving([torch.zeros(1), torch.ones(1)]),
                      ["holds a GenericList, not a dict of str -> tensor"])
        self.rejected("int_value.pt", saving({"0.weight": 3}), ["'0.weight' holds a Int"])
        self.rejected("int_key.pt", saving({1: torch.zeros(1)}), ["a key is a Int"])
        self.rejected("legacy.pt", saving(good, _use_new_zipfile_serialization=False),
                      ["not a zip archive"])
        self.rejected("protocol4.pt", saving(good, pickle_protocol=4), ["protocol 4"])
        self.rejected("absent.pt", lambda path: None, ["no such file"])

    def shared_objects(self):
        """Objects torch.save writes once and reads back from its memo load: one tensor under two
        names (read back while the batch of items holding it is still open), and keys that are
        the strings inside a tensor's pickle ('cpu', 'storage')."""
        shared = torch.arange(3.0)
        values = dict(patterned(5), a=shared, b=shared, cpu=torch.ones(2), storage=shared)
        path = self.path("shared_objects.pt")
        torch.save(values, path)
        result = self.run_tool("load", "--lax", path)
        self.check(result.returncode == 0 and result.stdout.strip() == path + ": ok",
                   "a file of shared objects loads: " + result.stdout + result.stderr)

    def parameters(self):
        """nn.Parameter values (state_dict(keep_vars=True), a dict of named_parameters()) pickle as
        calls of torch._utils._rebuild_parameter: they load as their data, bit-equal; one
        Parameter under two names and requires_grad=False ones too."""
        model = network()
        model.load_state_dict(patterned(5))
        path = self.path("keep_vars.pt")
        torch.save(model.state_dict(keep_vars=True), path)
        with zipfile.ZipFile(path) as archive:
            pickle = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        self.check(b"_rebuild_parameter" in pickle, "keep_vars=True pickles Parameters")
        result = self.run_tool("expect", path)
        self.check(result.returncode == 0, "Parameters load bit-equal: " + result.stderr)
        shared = nn.Parameter(torch.arange(3.0))
        frozen = {name: nn.Parameter(tensor, requires_grad=False)
                  for name, tensor in patterned(5).items() if tensor.is_floating_point()}
        path = self.path("parameters.pt")
        torch.save(dict(patterned(5), **frozen, a=shared, b=shared), path)
        result = self.run_tool("load", "--lax", path)
        self.check(result.returncode == 0 and result.stdout.strip() == path + ": ok",
                   "shared and frozen Parameters load: " + result.stdout + result.stderr)
        # Attributes of a Parameter's own (as libraries set them): PyTorch 2.x pickles them as
        # the state of a call of torch._utils._rebuild_parameter_with_state (a tuple of four, made
        # with a MARK); 1.13 leaves them out, and is made to pickle them as 2.x does here. Values
        # the attributes of several Parameters share are read back from the memo.
        for number, parameter in enumerate(model.parameters()):
            parameter._is_hf_initialized = True
            parameter.origin = {"dtype": torch.float16, "shape": [number, 2], "note": "ok"}
        path = self.path("attributes.pt")
        with parameters_pickled_with_state():
            torch.save(model.state_dict(keep_vars=True), path)
        with zipfile.ZipFile(path) as archive:
            pickle = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        self.check(b"_rebuild_parameter_with_state" in pickle,
                   "Parameters with attributes pickle their state")
        result = self.run_tool("expect", path)
        self.check(result.returncode == 0,
                   "Parameters with attributes load bit-equal: " + result.stderr)

    def forged(self):
        """Pickles no torch.save writes, in zips whose CRC-32s match (found by fuzzing): each is
        refused by name, where LibTorch's unpickler, which trusts the pickle, crashed, asked for
        32 GiB, read past its stack or threw what was not a torchbus error."""

        def archive(pickle, records=None):
            def write(path):
                with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zip_file:
                    zip_file.writestr("archive/data.pkl", pickle)
                    for key, data in (records or {"0": bytes(64), "1": bytes(64)}).items():
                        zip_file.writestr("archive/data/" + key, data)
                    zip_file.writestr("archive/version", b"3\n")
            return write

        def text(value):
            data = value.encode()
            return b"X" + struct.pack("<I", len(data)) + data

        def number(value):
            if 0 <= value < 256:
                return b"K" + bytes([value])
            if -2**31 <= value < 2**31:
                return b"J" + struct.pack("<i", value)
            return b"\x8a\x08" + value.to_bytes(8, "little", signed=True)  # LibTorch reads 8

        def tuple_of(*items):
            return b"(" + b"".join(items) + b"t"

        def one_tensor(offset, size, stride, numel, storage_type=b"FloatStorage"):
            """{'w': a float tensor on record 0 of 40 bytes}, as torch.save pickles it."""
            storage = tuple_of(text("storage"), b"ctorch\n" + storage_type + b"\n", text("0"),
                               text("cpu"), number(numel))
            tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n"
                      + tuple_of(storage + b"Q", number(offset), tuple_of(number(size)),
                                 tuple_of(number(stride)), b"\x89",
                                 b"ccollections\nOrderedDict\n)R") + b"R")
            return archive(b"\x80\x02ccollections\nOrderedDict\n)R(" + text("w") + tensor + b"u.",
                           {"0": bytes(40)})

        with_state = b"ctorch._utils\n_rebuild_parameter_with_state\n"
        cases = [
            # An instruction taking items from below the topmost mark (a segfault in LibTorch).
            ("below_mark.pt", b"\x80\x02K\x01K\x02(\x86d.", "takes more items than it pushed"),
            ("below_mark_build.pt", b"]X\x00\x00\x00\x00(btb", "takes more items than it pushed"),
            # NEWOBJ, which LibTorch reads otherwise than Python (a cycle, a segfault when deep).
            ("newobj.pt", b"\x80\x02]q\x00)\x81(h\x00e.", "opcode 0x81"),
            # A memo slot stored twice (inside a BUILD state that is dropped: a cycle).
            ("memo_twice.pt", b"\x80\x02]q\x00(}q\x01]q\x00bh\x00e.", "stores memo slot 0"),
            # A memo slot read before it was stored; one stored at 2^31 - 1 (a 32 GiB memo).
            ("memo_unset.pt", b"\x80\x02h\x00.", "reads memo slot 0 at byte 2, which it never"),
            ("memo_huge.pt", b"\x80\x02}r\xff\xff\xff\x7f.", "stores memo slot 2147483647"),
            # A dict read back into itself (a cycle, never freed).
            ("memo_cycle.pt", b"\x80\x02}q\x00(X\x01\x00\x00\x00ah\x00u.",
             "changes an object after reading it back from the memo"),
            # A dict of an odd number of items (LibTorch reads past its stack).
            ("odd_dict.pt", b"\x80\x02(X\x01\x00\x00\x00ad.", "a dict of an odd number of items"),
            # A key LibTorch cannot hash (a std::runtime_error).
            ("tuple_key.pt", b"\x80\x02(K\x01\x85K\x02d.", "Can't hash IValues"),
            # torch._utils._rebuild_parameter (not written) used other than by calling it with a
            # tuple: the items around it would be read in its place.
            ("parameter_value.pt", b"\x80\x02}(X\x01\x00\x00\x00actorch._utils\n_rebuild_parameter"
             b"\nu.", "uses torch._utils._rebuild_parameter other than by calling it"),
            ("parameter_no_tuple.pt", b"\x80\x02ctorch._utils\n_rebuild_parameter\n]R.",
             "calls torch._utils._rebuild_parameter at byte 36 without a tuple"),
            ("parameter_changed.pt", b"\x80\x02ctorch._utils\n_rebuild_parameter\n}b.",
             "changes torch._utils._rebuild_parameter at byte 36"),
            # A slot stored inside a parameter's dropped hooks, read back.
            ("parameter_dropped_slot.pt",
             b"\x80\x02ctorch._utils\n_rebuild_parameter\n(K\x01K\x02q\x00t"
             b"Rh\x00.", "reads memo slot 0 at byte 44, stored inside what the rewrite drops"),
            # A parameter's tuple of one: its closing TUPLE would be left without its MARK.
            ("parameter_one_argument.pt", b"\x80\x02}(X\x01\x00\x00\x00k" + with_state
             + b"(K\x01tRu.", "at byte 58 without a tuple of (data, requires_grad"),
            # A dropped slot read inside nested parameters' data, whose MARKs are dropped, then
            # a BUILD whose state starts where that read was before the MARKs went: the read
            # stays written and is refused.
            ("parameter_nested_dropped_slot.pt", b"\x80\x02}}q\x00bX\x01\x00\x00\x00k"
             + with_state + b"(" + with_state + b"(h\x00NNNtRNNNtRNbs.",
             "reads memo slot 0 at byte 103, stored inside what the rewrite drops"),
            # The protocol named again (a second PROTO would be copied where LibTorch reads it).
            ("proto_again.pt", b"\x80\x02}\x80\x02.", "names its protocol again at byte 3"),
            # A million nested tuples (a stack overflow when LibTorch frees them).
            ("nested.pt", b"\x80\x02N" + b"\x85" * 10**6 + b".", "nests deeper than 64 levels"),
        ]
        for name, pickle, part in cases:
            self.rejected(name, archive(pickle), [part])
        # Tensors whose offset, stride or storage reach outside the record of 40 bytes (10
        # floats): a negative offset (trained on 8 bytes before the record), a stride whose reach
        # wraps around 2^64 (a segfault when copied), a storage of 2^60 floats (a segfault when
        # saved again), a storage of 1 float viewed as 4 (Python's torch.load refuses it too).
        self.rejected("negative_offset.pt", one_tensor(-2, 10, 1, 10), ["negative storage offset"])
        self.rejected("wrapping_stride.pt", one_tensor(0, 10, 512409557603043101, 10),
                      ["or a reach beyond 2^64 bytes"])
        self.rejected("huge_storage.pt", one_tensor(0, 10, 1, 2**60),
                      ["'w' has a storage of 4611686018427387904 bytes, but its data record "
                       "holds 40"])
        # A quantized storage read as a plain tensor: no scale and zero point (LibTorch asserts
        # when it is used); torch.save's quantized tensors (_rebuild_qtensor) load.
        self.rejected("quantized_storage.pt", one_tensor(0, 10, 1, 10, b"QInt8Storage"),
                      ["'w' is a quantized tensor (QInt8) without its scale and zero point"])
        quantized = self.path("quantized.pt")
        torch.save({"q": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)}, quantized)
        result = self.run_tool("load", "--lax", quantized)
        self.check(result.returncode == 0 and result.stdout.strip() == quantized + ": ok",
                   "a quantized tensor torch.save wrote loads: " + result.stdout + result.stderr)
        self.rejected("small_storage.pt", one_tensor(0, 4, 1, 1),
                      ["'w' reaches 16 bytes into its storage, which holds 4"])
        try:
            torch.load(self.path("small_storage.pt"))
            self.check(False, "Python's torch.load refuses small_storage.pt too")
        except RuntimeError:
            self.check(True, "Python's torch.load refuses small_storage.pt too")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tool", required=True, help="the state_dict_tool program")
    parser.add_argument("--work", required=True, help="a folder for the files")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    checks = Checks(args.tool, args.work)
    checks.cpp_to_python()
    checks.python_to_cpp()
    checks.random_round_trip()
    checks.unrecorded_crcs()
    checks.errors()
    checks.shared_objects()
    checks.parameters()
    checks.forged()
    checks.check_rejected()
    if checks.failures:
        print("%d check(s) failed" % len(checks.failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
