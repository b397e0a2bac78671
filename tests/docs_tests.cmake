# The docs against the repository and the program. docs.citations: every file and numbered
# principle (docs/design.md) a comment cites exists. docs.numbers: every `kintsugi plan`
# prediction the docs quote is what the binary prints now (the sections it covers say
# "checked by CTest `docs.numbers`").
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  set(DOCS_PYTHON ${Python3_EXECUTABLE})
else()
  set(DOCS_PYTHON python3)
endif()
add_test(NAME docs.citations
         COMMAND ${DOCS_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_citations.py
                 ${PROJECT_SOURCE_DIR})
add_test(NAME docs.numbers
         COMMAND ${DOCS_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_doc_numbers.py
                 $<TARGET_FILE:kintsugi> ${PROJECT_SOURCE_DIR})
set_tests_properties(docs.numbers PROPERTIES TIMEOUT 300)
# docs.lists: README's documentation index names every docs/*.md, docs/config.md's key table
# and presets are the ones `kintsugi train --help-config` prints, and docs/switches.md's table is
# the one `kintsugi --help-switches` prints, with no other KINTSUGI_* name in the docs or
# sources and no getenv of one outside the table, so that no list drifts.
add_test(NAME docs.lists
         COMMAND ${DOCS_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_doc_lists.py
                 $<TARGET_FILE:kintsugi> ${PROJECT_SOURCE_DIR})
# docs.recipes: docs/extending.md's recipes (a family, an op, a parallelism) name only paths,
# functions and types the tree has, and each recipe's count of files is the number its steps
# open, so that a recipe is still true after the code it walks through moves.
add_test(NAME docs.recipes
         COMMAND ${DOCS_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_recipes.py
                 ${PROJECT_SOURCE_DIR})
