# Warnings every torchbus target is built with.
function(torchbus_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
endfunction()

# Every source file that includes torch/torch.h, even precompiled, spends ~8 s instantiating the
# templates LibTorch's headers leave pending at the end of each file (a precompiled header keeps
# parsed declarations, not those instantiations). The targets of many sources are therefore unity
# builds: CMake compiles their sources in batches of 8 (one file including the others), so the
# libraries and each test suite pay that cost a few times instead of once per source.
# -DTORCHBUS_UNITY_BUILD=OFF compiles every source on its own (quicker to rebuild one file).
function(torchbus_use_unity_build target)
  if(TORCHBUS_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# A library of this repository: target torchbus_<name>, alias torchbus::<name>, installed and
# exported under the same name.
function(torchbus_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS" ${ARGN})
  add_library(torchbus_${name} ${ARG_SOURCES})
  add_library(torchbus::${name} ALIAS torchbus_${name})
  set_target_properties(torchbus_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME torchbus_${name}
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(torchbus_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(torchbus_${name} PUBLIC ${ARG_PUBLIC_DEPS})
  target_compile_features(torchbus_${name} PUBLIC cxx_std_17)
  torchbus_set_warnings(torchbus_${name})
  torchbus_use_unity_build(torchbus_${name})
  install(TARGETS torchbus_${name} EXPORT torchbusTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# Parsing torch/torch.h takes ~15 s per source file, so every target of this repository that
# includes it compiles against a precompiled copy. A precompiled header is valid only for sources
# built with the same flags and definitions, so there are two, each built once:
# - torchbus_framework's own (position-independent, spdlog's definitions), reused by
#   torchbus_callbacks and the torchbus-train module: torchbus_use_library_pch(target);
# - torchbus_program_pch (an executable linked to torchbus::callbacks), reused by the examples,
#   the docs programs and the test helper programs: torchbus_use_program_pch(target).
# The test suites have their own (tests/CMakeLists.txt), with Boost.Test in it.
function(torchbus_use_library_pch target)
  if(target STREQUAL "torchbus_framework")
    target_precompile_headers(torchbus_framework PRIVATE <torch/torch.h>)
  else()
    target_precompile_headers(${target} REUSE_FROM torchbus_framework)
  endif()
endfunction()

function(torchbus_use_program_pch target)
  if(NOT TARGET torchbus_program_pch)
    add_library(torchbus_program_pch OBJECT EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
    target_link_libraries(torchbus_program_pch PRIVATE torchbus::callbacks)
    torchbus_set_warnings(torchbus_program_pch)
    target_precompile_headers(torchbus_program_pch PRIVATE <torch/torch.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM torchbus_program_pch)
endfunction()
