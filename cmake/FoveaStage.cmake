# fovea_stage(): one library target per pipeline stage, whose link dependencies mirror the
# pipeline, and whose compiler sees only the headers of the stage and of the stages upstream.
#
#   fovea_stage(pyramid
#     SOURCES pyramid.cpp downsample_ref.cpp downsample_hwy.cpp   # relative to src/<FOLDER>/
#     HEADERS pyramid.hpp                                         # include/fovea/<header>
#     DEPS image                                                  # upstream stages (public)
#     PRIVATE_DEPS vk                                             # upstream stages used inside only
#     PRIVATE_LIBS hwy::hwy)
#
# Defines the target fovea_<name> (alias fovea::<name>, exported as fovea::<name>, archive
# libfovea_<name>.a). FOLDER defaults to <name>; it may be nested (vulkan/vk). EXTRA_FOLDERS are
# more source folders the stage owns and sees (the store's Vulkan backends, vulkan/store).
# INTERNAL stages are built and linked like the others but install no public header.
#
# Stages are static archives of position-independent code compiled with hidden visibility: only
# what the public headers declare (FOVEA_API_BEGIN ... FOVEA_API_END, fovea/export.hpp) is
# visible outside. The shared library, libfovea.so (target fovea_shared, top-level
# CMakeLists.txt), is every stage linked whole into one object, so calls between stages into
# their private headers stay inside it; the CLI, tests, benchmarks and the Python module link
# the archives, which keep those internals reachable.
#
# Layering is enforced by the compiler, not by review: every stage compiles against its own
# include tree, <build>/layers/<name>/, which holds symbolic links to
#   fovea/<header>  for the public headers of the stage and of every stage upstream of it;
#   <folder>/       for the private source folders of the same stages (e.g. "extract/batch.hpp").
# A stage that includes a downstream stage's header (public or private) fails to build with
# "No such file or directory". The CLI, tests and benchmarks see everything (fovea::fovea).

set(FOVEA_LAYERS_DIR ${PROJECT_BINARY_DIR}/layers)
define_property(TARGET PROPERTY FOVEA_LAYER_HEADERS BRIEF_DOCS "fovea: public headers visible to a stage" FULL_DOCS "x")
define_property(TARGET PROPERTY FOVEA_LAYER_FOLDERS BRIEF_DOCS "fovea: source folders visible to a stage" FULL_DOCS "x")

function(fovea_stage name)
  cmake_parse_arguments(PARSE_ARGV 1 S "INTERNAL" "FOLDER"
    "SOURCES;HEADERS;DEPS;PRIVATE_DEPS;PUBLIC_LIBS;PRIVATE_LIBS;PRIVATE_DEFS;PRIVATE_INCLUDES;EXTRA_FOLDERS")
  if(NOT S_FOLDER)
    set(S_FOLDER ${name})
  endif()
  set(t fovea_${name})
  set(sources "")
  foreach(s IN LISTS S_SOURCES)
    if(IS_ABSOLUTE "${s}")
      list(APPEND sources "${s}")
    else()
      list(APPEND sources "${PROJECT_SOURCE_DIR}/src/${S_FOLDER}/${s}")
    endif()
  endforeach()
  add_library(${t} STATIC ${sources})
  add_library(fovea::${name} ALIAS ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME fovea_${name}
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

  # What this stage may see: its own headers and folder, plus everything upstream.
  set(headers ${S_HEADERS})
  set(folders ${S_FOLDER} ${S_EXTRA_FOLDERS})
  foreach(d IN LISTS S_DEPS S_PRIVATE_DEPS)
    if(NOT TARGET fovea_${d})
      message(FATAL_ERROR "fovea_stage(${name}): stage '${d}' must be defined before it (upstream first)")
    endif()
    get_target_property(h fovea_${d} FOVEA_LAYER_HEADERS)
    get_target_property(f fovea_${d} FOVEA_LAYER_FOLDERS)
    list(APPEND headers ${h})
    list(APPEND folders ${f})
  endforeach()
  list(REMOVE_DUPLICATES headers)
  list(REMOVE_DUPLICATES folders)
  set_target_properties(${t} PROPERTIES FOVEA_LAYER_HEADERS "${headers}" FOVEA_LAYER_FOLDERS "${folders}")

  set(layer ${FOVEA_LAYERS_DIR}/${name})
  file(REMOVE_RECURSE ${layer})
  file(MAKE_DIRECTORY ${layer}/fovea)
  foreach(h IN LISTS headers)
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/fovea/${h})
      message(FATAL_ERROR "fovea_stage(${name}): no header include/fovea/${h}")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/fovea/${h} ${layer}/fovea/${h} SYMBOLIC)
  endforeach()
  # A nested folder (vulkan/vk) is linked under a real directory (vulkan/), unless the stage sees
  # its parent folder too: then the parent's link already shows it (sorted: parents come first).
  list(SORT folders)
  set(linked "")
  foreach(f IN LISTS folders)
    set(shown FALSE)
    foreach(l IN LISTS linked)
      string(FIND "${f}" "${l}/" at)
      if(at EQUAL 0)
        set(shown TRUE)
      endif()
    endforeach()
    if(shown)
      continue()
    endif()
    get_filename_component(parent ${layer}/${f} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${f} ${layer}/${f} SYMBOLIC)
    list(APPEND linked ${f})
  endforeach()
  # Generated headers (fovea/version_gen.hpp) are visible to every stage.
  file(CREATE_LINK ${PROJECT_BINARY_DIR}/generated/fovea/version_gen.hpp ${layer}/fovea/version_gen.hpp SYMBOLIC)

  target_include_directories(${t}
    PUBLIC $<BUILD_INTERFACE:${layer}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${S_PRIVATE_INCLUDES})
  set(deps "")
  foreach(d IN LISTS S_DEPS)
    list(APPEND deps fovea_${d})
  endforeach()
  set(pdeps "")
  foreach(d IN LISTS S_PRIVATE_DEPS)
    list(APPEND pdeps fovea_${d})
  endforeach()
  target_link_libraries(${t} PUBLIC ${deps} ${S_PUBLIC_LIBS} PRIVATE ${pdeps} ${S_PRIVATE_LIBS})
  target_compile_definitions(${t} PRIVATE ${S_PRIVATE_DEFS})
  target_compile_options(${t} PRIVATE ${FOVEA_WARNINGS})

  set_property(GLOBAL APPEND PROPERTY FOVEA_STAGES ${name})
  if(NOT S_INTERNAL)
    set_property(GLOBAL APPEND PROPERTY FOVEA_PUBLIC_HEADERS ${S_HEADERS})
  endif()
endfunction()

# fovea_spirv(<out-var> <prefix> <shader>...): compiles GLSL shaders with glslc at build time
# into C initializer lists of uint32 words, <build>/generated/fovea_spirv/<prefix><name>.spv.inc,
# which a source #includes into a static array. glslc writes a depfile for shared .glsl includes.
function(fovea_spirv out prefix)
  set(dir ${PROJECT_BINARY_DIR}/generated/fovea_spirv)
  file(MAKE_DIRECTORY ${dir})
  set(outputs "")
  foreach(shader IN LISTS ARGN)
    get_filename_component(name ${shader} NAME_WE)
    set(o ${dir}/${prefix}${name}.spv.inc)
    add_custom_command(OUTPUT ${o}
      COMMAND ${FOVEA_GLSLC} --target-env=vulkan1.1 -O -mfmt=c -MD -MF ${o}.d -MT ${o} -o ${o} ${shader}
      DEPENDS ${shader}
      DEPFILE ${o}.d
      COMMENT "glslc ${prefix}${name}"
      VERBATIM)
    list(APPEND outputs ${o})
  endforeach()
  set(${out} ${outputs} PARENT_SCOPE)
endfunction()
