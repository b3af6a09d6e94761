# naarpc_generate(): C++ stubs and skeletons from a *.naa.yaml IDL, like
# Bazel's naarpc_cc_library (codegen/naarpc.bzl): naarpc_idlc validates the
# IDL and writes its IR, codegen/naarpc_gen.py renders it.
#
#   naarpc_generate(TARGET <target> IDL <file.naa.yaml> [INCLUDE_PREFIX <dir>])
#
# Adds <stem>.naa.cc to <target>, the generated directory to its include path
# (#include "<dir>/<stem>.naa.h"; no INCLUDE_PREFIX: "<stem>.naa.h") and
# links naarpc::naarpc. <stem>.naa_mock.h (gMock) is generated next to the
# header; a target that includes it links GTest::gmock itself.
#
# Uses NAARPC_GENERATOR and NAARPC_PYTHON, set by naarpcConfig.cmake (or by
# naarpc's own CMakeLists.txt under add_subdirectory()).
set(_NAARPC_GENERATOR "${NAARPC_GENERATOR}" CACHE INTERNAL "naarpc_gen.py")
set(_NAARPC_PYTHON "${NAARPC_PYTHON}" CACHE INTERNAL "Python 3 with Jinja2")

function(naarpc_generate)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;IDL;INCLUDE_PREFIX" "")
  if(NOT ARG_TARGET OR NOT ARG_IDL OR ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: naarpc_generate(TARGET <target> IDL <file.naa.yaml> [INCLUDE_PREFIX <dir>])")
  endif()
  if(NOT TARGET ${ARG_TARGET})
    message(FATAL_ERROR "naarpc_generate: no target ${ARG_TARGET}")
  endif()
  get_filename_component(idl "${ARG_IDL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  get_filename_component(name "${idl}" NAME)
  if(NOT name MATCHES "\\.naa\\.yaml$")
    message(FATAL_ERROR "naarpc_generate: IDL must end in .naa.yaml, got ${ARG_IDL}")
  endif()
  string(REGEX REPLACE "\\.naa\\.yaml$" "" stem "${name}")

  set(root "${CMAKE_CURRENT_BINARY_DIR}/naarpc_generated")
  set(dir "${root}")
  if(ARG_INCLUDE_PREFIX)
    set(dir "${root}/${ARG_INCLUDE_PREFIX}")
  endif()
  file(RELATIVE_PATH label "${CMAKE_SOURCE_DIR}" "${idl}")
  if(label MATCHES "^\\.\\./")
    set(label "${name}")
  endif()
  get_filename_component(gen_dir "${_NAARPC_GENERATOR}" DIRECTORY)
  file(GLOB gen_files "${gen_dir}/*.py" "${gen_dir}/templates/*.j2")

  set(ir "${dir}/${stem}.naa.ir.json")
  # One target owns the generated files: a second one would write them too,
  # concurrently, and compile them again. Others link the owner.
  get_property(owner GLOBAL PROPERTY "_naarpc_generated ${ir}")
  if(owner AND NOT owner STREQUAL ARG_TARGET)
    message(FATAL_ERROR "naarpc_generate: ${ARG_IDL} is already generated into this directory "
                        "for target ${owner}; link ${owner} from ${ARG_TARGET} instead of "
                        "generating it again (one target owns the generated code)")
  endif()
  set_property(GLOBAL PROPERTY "_naarpc_generated ${ir}" "${ARG_TARGET}")
  set(outputs "${dir}/${stem}.naa.h" "${dir}/${stem}.naa.cc" "${dir}/${stem}.naa_mock.h")
  add_custom_command(
    OUTPUT "${ir}" ${outputs}
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${dir}"
    COMMAND naarpc::naarpc_idlc "${idl}" --include_prefix "${ARG_INCLUDE_PREFIX}"
            --label "${label}" --out "${ir}"
    COMMAND "${_NAARPC_PYTHON}" "${_NAARPC_GENERATOR}" "${ir}" --out_dir "${dir}"
    DEPENDS "${idl}" naarpc::naarpc_idlc ${gen_files}
    COMMENT "naarpc: generating ${stem}.naa.h/.cc from ${label}"
    VERBATIM)
  target_sources(${ARG_TARGET} PRIVATE ${outputs})
  target_include_directories(${ARG_TARGET} PUBLIC "$<BUILD_INTERFACE:${root}>")
  # Properties, not target_link_libraries(): callers may use either signature.
  set_property(TARGET ${ARG_TARGET} APPEND PROPERTY LINK_LIBRARIES naarpc::naarpc)
  get_target_property(type ${ARG_TARGET} TYPE)
  if(NOT type STREQUAL "EXECUTABLE")
    set_property(TARGET ${ARG_TARGET} APPEND PROPERTY INTERFACE_LINK_LIBRARIES naarpc::naarpc)
  endif()
endfunction()
