/* tests/unit/test_kernels_table.c — every op slot of every backend is filled.
 *
 * The slots come from kernels.h's one op list (KF_BACKEND_OPS), so a slot
 * added there and left NULL by a backend's table fails here by name. The
 * CPU backend and the recorder (dry, and over the CPU) always; the CUDA one
 * where the build has it (the emulation
 * build, make emu-tests, and make test-cuda on a GPU).
 */
#include <stdio.h>

#include "kernels/kernels.h"
#include "kernels/record.h"
#include "tests/test.h"

static void check_slots(const kf_backend *b) {
    const char *backend = b->name;
#define CHECK_SLOT(ret, op, params, args)                                                          \
    T_CHECK(b->op != NULL, "%s backend: op slot %s is NULL", backend, #op);
    KF_BACKEND_OPS(CHECK_SLOT)
#undef CHECK_SLOT
}

int main(void) {
    kf_backend *cpu = kernels_cpu_create();
    check_slots(cpu);
    cpu->destroy(cpu);
    kf_backend *dry = kernels_record_create(NULL, 0);
    check_slots(dry);
    dry->destroy(dry);
    kf_backend *rec = kernels_record_create(kernels_cpu_create(), 0);
    check_slots(rec);
    rec->destroy(rec);
#ifdef KF_CUDA
    char why[256];
    kf_backend *cuda = kernels_cuda_create(0, why, sizeof why);
    T_CHECK(cuda != NULL, "cuda backend: %s", why);
    if (cuda) {
        check_slots(cuda);
        cuda->destroy(cuda);
    }
#endif
    return T_DONE();
}
