# SPDX-License-Identifier: MIT
# Man pages, one source each in docs/man/*.scd (scdoc). A page that documents several programs
# is installed once and the others' names are ".so" links to it. molly-train(1) is installed
# only when this tree builds the molly-train program (hence included after the tools).
find_program(MOLLY_SCDOC scdoc)
set(MOLLY_MAN AUTO CACHE STRING "Build and install the man pages (ON, OFF, AUTO: when scdoc is found)")
if(MOLLY_MAN STREQUAL "ON" AND NOT MOLLY_SCDOC)
  message(FATAL_ERROR "MOLLY_MAN=ON needs scdoc (apt-get install scdoc)")
endif()
if(MOLLY_SCDOC AND NOT MOLLY_MAN STREQUAL "OFF")
  set(_molly_man_src ${CMAKE_SOURCE_DIR}/docs/man)
  set(_molly_man_out ${CMAKE_BINARY_DIR}/man)
  set(_molly_pages mollyd.8 mollyd.conf.5 molly.1 molly.4 molly-run.1 molly-bench.1
      molly-quantize.1 molly-perplexity.1)
  if(TARGET molly-train)
    list(APPEND _molly_pages molly-train.1)
  endif()
  # name -> the page that documents it
  set(_molly_man_links molly-tokenize.1:molly-run.1 molly-gguf.1:molly-run.1
      molly-mkmodel.1:molly-run.1 molly-adapter.1:molly-run.1 molly-mkadapter.1:molly-run.1
      molly-bpe-train.1:molly-run.1
      molly-bench-gateway.1:molly-bench.1 molly-bench-policy.1:molly-bench.1
      molly-bench-route.1:molly-bench.1 molly-bench-registry.1:molly-bench.1
      molly-bench-egress.1:molly-bench.1 molly-bench-sensitive.1:molly-bench.1
      molly-train-sensitive.1:molly-bench.1)
  set(_molly_man_files)
  foreach(page ${_molly_pages})
    add_custom_command(OUTPUT ${_molly_man_out}/${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${_molly_man_out}
      COMMAND sh -c "'${MOLLY_SCDOC}' < '${_molly_man_src}/${page}.scd' > '${_molly_man_out}/${page}.tmp' && mv '${_molly_man_out}/${page}.tmp' '${_molly_man_out}/${page}'"
      DEPENDS ${_molly_man_src}/${page}.scd COMMENT "man page ${page}" VERBATIM)
    list(APPEND _molly_man_files ${_molly_man_out}/${page})
    string(REGEX REPLACE ".*\\.([0-9])$" "\\1" _sec ${page})
    install(FILES ${_molly_man_out}/${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_sec}
            COMPONENT daemon)
  endforeach()
  foreach(link ${_molly_man_links})
    string(REPLACE ":" ";" _pair ${link})
    list(GET _pair 0 _name)
    list(GET _pair 1 _target)
    string(REGEX REPLACE ".*\\.([0-9])$" "\\1" _sec ${_name})
    file(WRITE ${_molly_man_out}/${_name} ".so man${_sec}/${_target}\n")
    install(FILES ${_molly_man_out}/${_name} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_sec}
            COMPONENT daemon)
  endforeach()
  add_custom_target(man ALL DEPENDS ${_molly_man_files})
endif()
