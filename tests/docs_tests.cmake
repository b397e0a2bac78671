# The docs against the repository. docs.citations: every file and numbered principle
# (docs/design.md) a comment cites exists.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(DOCS_PYTHON ${Python3_EXECUTABLE})
else()
  set(DOCS_PYTHON python3)
endif()
add_test(NAME docs.citations
         COMMAND ${DOCS_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_citations.py
                 ${PROJECT_SOURCE_DIR})
