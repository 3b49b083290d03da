#!/usr/bin/python3
"""Runs collate_reference, which writes samples and the batch torchbus::collate made of them, and
remakes the batch with PyTorch (Debian's python3-torch): the stacked fields with
torch.utils.data.default_collate over the samples as dicts, the padded ones with
torch.nn.utils.rnn.pad_sequence(batch_first=True). Every field must be equal, dtype and shape
included. Usage: compare_collate.py PATH/TO/collate_reference WORK_DIR"""

import os
import subprocess
import sys

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import default_collate

STACKED = ["data", "target", "mask", "weight"]
PADDED = {"ids": 0, "frames": -1}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    subprocess.run([sys.argv[1], sys.argv[2]], check=True)
    written = torch.load(os.path.join(sys.argv[2], "samples.pt"))
    batch = torch.load(os.path.join(sys.argv[2], "batch.pt"))
    count = 1 + max(int(key.split(".")[0]) for key in written)
    samples = [{field: written["%d.%s" % (i, field)] for field in STACKED + list(PADDED)}
               for i in range(count)]
    expected = default_collate([{field: sample[field] for field in STACKED} for sample in samples])
    for field, value in PADDED.items():
        expected[field] = pad_sequence([sample[field] for sample in samples], batch_first=True,
                                       padding_value=value)
    failures = []
    for field, tensor in expected.items():
        ours = batch[field]
        if ours.dtype != tensor.dtype or ours.shape != tensor.shape or not torch.equal(ours,
                                                                                        tensor):
            failures.append("%s: torchbus %s %s, PyTorch %s %s" % (
                field, ours.dtype, tuple(ours.shape), tensor.dtype, tuple(tensor.shape)))
        else:
            print("%s: %s %s equal" % (field, tuple(ours.shape), ours.dtype))
    for line in failures:
        print("FAIL", line)
    print("%d fields, %d differences" % (len(expected), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
