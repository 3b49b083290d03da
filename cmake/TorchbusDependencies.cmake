# The packages torchbus builds on, found so that LibTorch's bundled copies of fmt and protobuf
# never meet ours (docs/getting-started.md, "Building against the official LibTorch"):
#
# - The official LibTorch (the zip, or the one inside a PyTorch wheel) ships headers of the fmt
#   and protobuf it was built with in its include/ directory. With CMAKE_PREFIX_PATH=<libtorch>,
#   find_path would take those for ours (protoc's generated code then meets another protobuf's
#   headers), so our packages are found with LibTorch's prefixes ignored.
# - Our packages are found before Torch: the official LibTorch links its protobuf in, and its
#   Caffe2Config.cmake defines protobuf::libprotobuf as an alias of an empty target `dummy` when
#   no such target exists yet, which install(EXPORT) then refuses.
# - LibTorch's include directories come before the compiler's own (/usr/include is never passed
#   with -I), so a bundled fmt/ or google/ there would shadow ours in every file that includes
#   both. Each bundled directory is forwarded, by a symbolic link in the build tree searched first,
#   to the one of the package we found; LibTorch's headers that include fmt get ours too.

# The prefixes of CMAKE_PREFIX_PATH that hold a LibTorch with bundled third-party headers.
function(torchbus_libtorch_prefixes_with_bundled_headers out)
  set(prefixes "")
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${prefix}/include/torch/csrc/api/include/torch/torch.h" AND
       (EXISTS "${prefix}/include/fmt" OR EXISTS "${prefix}/include/google/protobuf"))
      list(APPEND prefixes "${prefix}")
    endif()
  endforeach()
  set(${out} "${prefixes}" PARENT_SCOPE)
endfunction()

# The include directory of an imported target, or "" when it has none.
function(torchbus_include_directory_of target out)
  set(directory "")
  if(TARGET ${target})
    get_target_property(directories ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(directories)
      list(GET directories 0 directory)
    endif()
  endif()
  set(${out} "${directory}" PARENT_SCOPE)
endfunction()

# Forwards each folder LibTorch's include directories bundle (fmt/, google/, ...) to the copy of
# the package we found: include_directories(BEFORE SYSTEM) of a folder of symbolic links.
function(torchbus_shadow_bundled_headers)
  list(GET Protobuf_INCLUDE_DIRS 0 protobuf_directory)
  set(ours "google=${protobuf_directory}")
  foreach(pair IN ITEMS fmt=fmt::fmt spdlog=spdlog::spdlog boost=Boost::headers
                        nlohmann=nlohmann_json::nlohmann_json CLI=CLI11::CLI11)
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 1 target)
    torchbus_include_directory_of(${target} directory)
    if(directory)
      list(GET pair 0 name)
      list(APPEND ours "${name}=${directory}")
    endif()
  endforeach()
  set(forward "${CMAKE_BINARY_DIR}/torchbus-own-headers")
  file(REMOVE_RECURSE "${forward}")
  set(forwarded "")
  foreach(pair IN LISTS ours)
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 name)
    list(GET pair 1 directory)
    foreach(torch_directory IN LISTS TORCH_INCLUDE_DIRS)
      if(EXISTS "${torch_directory}/${name}" AND NOT torch_directory STREQUAL directory)
        file(MAKE_DIRECTORY "${forward}")
        file(CREATE_LINK "${directory}/${name}" "${forward}/${name}" SYMBOLIC)
        list(APPEND forwarded "${name}/ -> ${directory}/${name}")
        break()
      endif()
    endforeach()
  endforeach()
  if(forwarded)
    include_directories(BEFORE SYSTEM "${forward}")
    message(STATUS "torchbus: LibTorch bundles headers of its own; using ours: ${forwarded}")
  endif()
endfunction()

# CMake 3.30+ warns unless told to use Boost's own BoostConfig.cmake (Debian 12 and 13 ship it).
if(POLICY CMP0167)
  cmake_policy(SET CMP0167 NEW)
endif()

torchbus_libtorch_prefixes_with_bundled_headers(libtorch_prefixes)
set(saved_ignore_prefix_path "${CMAKE_IGNORE_PREFIX_PATH}")
list(APPEND CMAKE_IGNORE_PREFIX_PATH ${libtorch_prefixes})
find_package(Protobuf REQUIRED)  # TensorBoard records (callbacks/proto)
find_package(ZLIB REQUIRED)  # the CRC-32 of state_dict files' zip records
find_package(spdlog REQUIRED)
if(TORCHBUS_BUILD_TESTS)
  find_package(Boost 1.74 REQUIRED COMPONENTS unit_test_framework)
else()
  find_package(Boost 1.74 REQUIRED)
endif()
if(TORCHBUS_BUILD_EXAMPLES OR TORCHBUS_BUILD_TESTS)
  find_package(CLI11 REQUIRED)  # torchbus-train's flags
  find_package(OpenSSL REQUIRED)  # libcrypto: SHA-256 of torchbus-train's final parameters
  find_package(nlohmann_json 3 REQUIRED)  # summary.json, the tests' reference programs
endif()
if(TORCHBUS_BUILD_EXAMPLES)
  # libcsv (Debian's libcsv-dev, no CMake package): torchbus-train's CSV files, per RFC 4180
  find_path(LIBCSV_INCLUDE_DIR csv.h REQUIRED)
  find_library(LIBCSV_LIBRARY csv REQUIRED)
  add_library(torchbus_libcsv INTERFACE)
  target_include_directories(torchbus_libcsv SYSTEM INTERFACE ${LIBCSV_INCLUDE_DIR})
  target_link_libraries(torchbus_libcsv INTERFACE ${LIBCSV_LIBRARY})
endif()
if(TORCHBUS_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
set(CMAKE_IGNORE_PREFIX_PATH "${saved_ignore_prefix_path}")
find_package(Torch REQUIRED)
torchbus_shadow_bundled_headers()

# The official LibTorch (a PyTorch wheel's too) carries copies of parts of libstdc++ of its own,
# std::filesystem among them, and exports them; PyTorch 2.11's remove_all calls through a null
# pointer when called from outside. A program binds each symbol to the first library on its link
# line that defines it, so torchbus's libraries name the C++ runtime before LibTorch in their
# interface and every program linking them reaches libstdc++'s own (docs/getting-started.md,
# "Building against the official LibTorch"). Empty with another C++ runtime (libc++).
include(CheckCXXSymbolExists)
check_cxx_symbol_exists(__GLIBCXX__ cstddef TORCHBUS_USES_LIBSTDCXX)
set(TORCHBUS_CXX_RUNTIME "")
if(TORCHBUS_USES_LIBSTDCXX)
  set(TORCHBUS_CXX_RUNTIME stdc++)
endif()
