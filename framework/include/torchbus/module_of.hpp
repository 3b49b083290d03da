#pragma once

/// \file
/// module_of: the module behind what a user passes as a model (a ModuleHolder or a shared_ptr).

#include <torch/nn/module.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace torchbus::detail {

template <typename Model, typename = void>
struct IsModuleHolder : std::false_type {};
template <typename Model>
struct IsModuleHolder<Model, std::void_t<decltype(std::declval<Model&>().ptr())>> : std::true_type {
};

/// The module behind a ModuleHolder (`torch::nn::Linear`, TORCH_MODULE types) or a shared_ptr;
/// null for an empty holder (`torch::nn::Linear(nullptr)`) or a null pointer.
template <typename Model>
std::shared_ptr<torch::nn::Module> module_of(const Model& model) {
  if constexpr (IsModuleHolder<Model>::value) {
    if (model.is_empty()) return nullptr;
    return model.ptr();
  } else {
    return model;
  }
}

}  // namespace torchbus::detail
