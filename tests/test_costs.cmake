# The suite's longest tests and about what each takes (seconds of the 2-core machine, measured
# with `ctest -j2`), as CTest's COST: CTest starts the costliest tests first, and knows their
# times only from a run it has made (build/Testing/Temporary/CTestCostData.txt). Without these,
# a fresh build ran the tests in the order they are declared, and the last ones declared (the
# CUDA emulator's) ran at the end, one core working on them while the other had nothing left.
# Keep the list to the tests that take several times a typical one, and their numbers roughly
# current (docs/architecture.md, "The test suite", says how to read CTest's own).
set(KINTSUGI_TEST_COSTS
    cuda_emulator.CudaDense 40
    cuda_emulator.CudaCheckpoint 18
    cuda_emulator.CudaModel_gpt 12
    cuda_emulator.CudaModel_bloom 8
    cuda_emulator.CudaTyped 15
    cuda_emulator.CudaGemm 6
    slurm.jobs 25
    ckpt.stop_mid_train_under_mpirun 18
    ckpt.stop_mid_train_pp2_under_mpirun 18
    ckpt.stop_mid_eval_under_mpirun 18
    ckpt.stop_mid_eval_pp2_under_mpirun 18
    Training.TinyGptLearnsBrownCorpus 30
    MixedPrecisionTraining.Bf16AndFp16FollowTheFp32LossCurve 35
    mpi.plan_matches_runs 10
    energy.fake_rapl_serial_and_dp2 10
    docs.numbers 15)

# Sets the COST of the listed tests this directory declares. With UNIT_TESTS, also of those
# gtest_discover_tests declares when CTest runs: through a file CTest reads after the
# discovered tests (a directory's TEST_INCLUDE_FILES are read in the order they were added,
# before its add_test() tests; CTest ignores names it does not know).
function(kintsugi_set_test_costs)
  cmake_parse_arguments(PARSE_ARGV 0 arg "UNIT_TESTS" "" "")
  set(costs ${KINTSUGI_TEST_COSTS})
  set(unit_costs "")
  while(costs)
    list(POP_FRONT costs name cost)
    if(TEST ${name})
      set_tests_properties(${name} PROPERTIES COST ${cost})
    elseif(arg_UNIT_TESTS)
      string(APPEND unit_costs "set_tests_properties([==[${name}]==] PROPERTIES COST ${cost})\n")
    endif()
  endwhile()
  if(unit_costs)
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/unit_test_costs.cmake "${unit_costs}")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES
                 ${CMAKE_CURRENT_BINARY_DIR}/unit_test_costs.cmake)
  endif()
endfunction()
