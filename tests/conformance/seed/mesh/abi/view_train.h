/* views::train (SPEC 7) and the program's ABI words (SPEC 3, 8), written from SPEC.md for meshnb's tests:
 * the seed's train.c (shared/seed) builds over these three headers into a native executor. */
#ifndef MESH_ABI_VIEW_TRAIN_H
#define MESH_ABI_VIEW_TRAIN_H
#include <stdbool.h>
#include <stdint.h>

enum {
  MESH_TRAIN_T_PARAMS = 0, MESH_TRAIN_T_LR = 16, MESH_TRAIN_T_STEPS_PER_TASK = 20, MESH_TRAIN_T_INV_BATCH = 24,
  MESH_TRAIN_T_NEXT_STEP = 28, MESH_TRAIN_T_ERR = 32, MESH_TRAIN_T_PENDING = 36, MESH_TRAIN_T_ROUND = 40,
  MESH_TRAIN_T_STEP_HI = 44, MESH_TRAIN_T_X = 64, MESH_TRAIN_T_Y = 1088, MESH_TRAIN_T_LOSS = 2112,
  MESH_VIEW_BYTES = 4096, MESH_TRAIN_SAMPLES = 256, MESH_TRAIN_WARP = 32, MESH_EX_SLOT_WORDS = 8
};
#define MESH_TRAIN_LR 0.5f
#define MESH_TRAIN_STEPS_PER_TASK 64u
#define MESH_OP_TASK 0x0u
#define MESH_TRAIN_OP_SET_LR 0x10u
#define MESH_R_NONE 0u
#define MESH_R_BAD_OP 0xFFFFFFFFu
enum { MESH_TRAIN_C_INITS = 0, MESH_TRAIN_C_STEPS = 1, MESH_TRAIN_C_TIMEOUTS = 2 };
#endif
