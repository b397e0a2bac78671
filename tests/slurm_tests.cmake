# kintsugi under Slurm (docs/slurm.md): the test starts slurmctld and slurmd on this machine
# (as root; scripts/setup.sh installs them) and runs an srun launch, the batch script
# scripts/slurm_train.sbatch, pre-emption by `scancel --signal=TERM` and by the time-limit
# signal, each followed by a requeue that resumes bit for bit, and a job array of two runs.
# Skips (77, with the reason printed) only where Slurm is not installed or not root.
add_test(NAME slurm.jobs
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/slurm/slurm_jobs.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${PROJECT_SOURCE_DIR}/scripts/slurm_train.sbatch
                 ${MPI_OUT} ${MICRO_RUN} --set train.steps=8)
# Four to eight ranks compute at a time (srun; the sbatch job beside the array's two jobs of two).
set_tests_properties(slurm.jobs PROPERTIES LABELS slurm SKIP_RETURN_CODE 77 PROCESSORS 4
                                           TIMEOUT 420)
