# Installs the built kiln into a scratch prefix, builds tests/consumer against
# it with find_package(kiln), and runs it. Invoked by CTest with -DSRC= -DBIN=
# and the build's compile and link flags (-DCXX_FLAGS= -DLINK_FLAGS=): a
# sanitizer build's libraries need the same runtime in the consumer.
set(work ${BIN}/consumer)
file(REMOVE_RECURSE ${work})
foreach(step
    "${CMAKE_COMMAND};--install;${BIN};--prefix;${work}/prefix"
    "${CMAKE_COMMAND};-S;${SRC}/tests/consumer;-B;${work}/build;-G;Ninja;-DCMAKE_PREFIX_PATH=${work}/prefix;-DCMAKE_BUILD_TYPE=Release;-DCMAKE_CXX_FLAGS=${CXX_FLAGS};-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}"
    "${CMAKE_COMMAND};--build;${work}/build"
    "${work}/build/consumer")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${step}\n${err}")
  endif()
endforeach()
