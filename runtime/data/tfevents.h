/*
 * tfevents.h — TensorBoard event files (tfevents.c): std.train's and
 * std.tune's `tensorboard_dir` (docs/observability.md, "TensorBoard").
 *
 * A file is TFRecord framing (u64 length, masked CRC-32C of the length,
 * the bytes, masked CRC-32C of the bytes) around Event protocol buffers:
 * the first carries file_version "brain.Event:2", each later one a
 * wall_time, a step and one Summary.Value (tag, simple_value).  The few
 * fields are encoded by hand; TensorBoard's EventAccumulator reads them
 * (bench/observability/read_tfevents.py).
 */
#ifndef SF_TFEVENTS_H
#define SF_TFEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* TFRecord's mask of a CRC-32C (core's sf__crc32c). */
uint32_t sf__crc32c_mask(uint32_t crc);

/* Appends scalar (tag, value) at step to the event file of dir, made (and
 * dir with it) on the first call for that dir in this process:
 * DIR/events.out.tfevents.SECONDS.HOST.PID.sflow.  Each record is flushed
 * at once, so TensorBoard shows a run as it goes.  False with a message
 * naming the file when the folder or file cannot be written. */
bool sf__tb_scalar(const char *dir, const char *tag, int64_t step, double value,
                   double wall_time, char *err, size_t errlen);
/* Closes every open event file (at exit; later scalars reopen new files). */
void sf__tb_close_all(void);

#endif
