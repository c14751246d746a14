/* pipeline/build_outdir.h — the output directory of `kf shards build`
 * (OUT = build_config.out, holding OUT/train/shard-NNNNN.lmdb,
 * OUT/valid/..., the manifest and .build.lock). Used by pipeline/build.c. */
#ifndef KF_PIPELINE_BUILD_OUTDIR_H
#define KF_PIPELINE_BUILD_OUTDIR_H

#include <stdint.h>

#include "common/error.h"
#include "pipeline/build_config.h"

/** Takes OUT/.build.lock (flock: released by the kernel even on kill -9),
 * waiting (with a log line) while another build of c holds it.
 * @return the lock's fd (the caller closes it to release), or -1 with err. */
int build_out_lock(const build_config *c, kf_err *err);

/** Creates OUT/train and OUT/valid, removes the old manifest (durably, so a
 * half-rebuilt set is never readable), then temp files of a killed build.
 * @return 0, or -1 with err. */
int build_out_prepare(const build_config *c, kf_err *err);

/** Removes shard files numbered >= n in OUT/split, then fsyncs that
 * directory (making the kept shards' names durable).
 * @return 0, or -1 with err. */
int build_out_remove_orphans(const build_config *c, const char *split, int64_t n, kf_err *err);

#endif
