// Compiled only to build the precompiled torch/torch.h of cmake/TorchbusHelpers.cmake.
