# Warnings every torchbus target is built with.
function(torchbus_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
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
  install(TARGETS torchbus_${name} EXPORT torchbusTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
