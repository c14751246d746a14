/* trainer/cli/omp_env.h — OpenMP start-up settings for the compute commands.
 *
 * The CPU backend runs GEMMs on OpenBLAS's own threads and the other ops on
 * OpenMP threads. With libgomp's default wait policy, idle OpenMP workers
 * spin for a while after every parallel region and take the cores away from
 * OpenBLAS (measured here: up to 2x slower training steps on 2 cores).
 * libgomp reads OMP_WAIT_POLICY only when the process starts, so a command
 * that wants the passive policy re-executes itself once with it set.
 */
#ifndef KF_TRAINER_CLI_OMP_ENV_H
#define KF_TRAINER_CLI_OMP_ENV_H

/** Unless OMP_WAIT_POLICY is already set (the user's choice wins), sets it to
 * "passive" and re-executes the current process with the same arguments
 * (/proc/self/exe, /proc/self/cmdline). Returns only when no re-exec
 * happened (already set, or the re-exec failed). Call before any thread or
 * MPI start-up. */
void omp_env_passive(void);

#endif
