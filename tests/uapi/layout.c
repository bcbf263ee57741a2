/* SPDX-License-Identifier: MIT */
/*
 * layout.c: the /dev/molly ABI has one layout for every caller. Compiled as C and as C++, for
 * 64-bit and (with gcc-multilib) 32-bit x86, by tests/uapi/check.sh: the offsets and sizes
 * below are the ABI (docs/uapi.md); a build that disagrees fails to compile.
 */
#include <linux/molly.h>
#include <stddef.h>

#ifdef __cplusplus
#define ABI_ASSERT(c, msg) static_assert(c, msg)
#else
#define ABI_ASSERT(c, msg) _Static_assert(c, msg)
#endif

#define SIZE(T, n) ABI_ASSERT(sizeof(struct T) == (n), #T " size")
#define OFF(T, f, n) ABI_ASSERT(offsetof(struct T, f) == (n), #T "." #f " offset")

SIZE(molly_version, 48);
OFF(molly_version, size, 0);
OFF(molly_version, abi_version, 4);
OFF(molly_version, features, 8);
OFF(molly_version, text_max, 12);
OFF(molly_version, event_max, 16);
OFF(molly_version, max_inflight_file, 20);
OFF(molly_version, max_inflight_total, 24);
OFF(molly_version, reserved, 32);

SIZE(molly_submit, 208);
OFF(molly_submit, flags, 4);
OFF(molly_submit, id, 8);
OFF(molly_submit, text_len, 16);
OFF(molly_submit, max_tokens, 20);
OFF(molly_submit, temperature_milli, 24);
OFF(molly_submit, top_p_milli, 28);
OFF(molly_submit, seed, 32);
OFF(molly_submit, declared_class, 40);
OFF(molly_submit, reserved0, 44);
OFF(molly_submit, model, 48);
OFF(molly_submit, reserved, 176);

SIZE(molly_cancel, 16);
OFF(molly_cancel, id, 8);

SIZE(molly_status, 40);
OFF(molly_status, flags, 4);
OFF(molly_status, inflight, 8);
OFF(molly_status, queued_bytes, 12);
OFF(molly_status, inflight_total, 16);
OFF(molly_status, staged_bytes, 20);
OFF(molly_status, reserved, 24);

SIZE(molly_event, 24);
OFF(molly_event, type, 4);
OFF(molly_event, flags, 6);
OFF(molly_event, id, 8);
OFF(molly_event, len, 16);

SIZE(molly_done, 288);
OFF(molly_done, finish_reason, 16);
OFF(molly_done, model, 32);
OFF(molly_done, target, 160);

SIZE(molly_error, 328);
OFF(molly_error, name, 8);
OFF(molly_error, message, 72);

SIZE(molly_ctl_msg, 264);
OFF(molly_ctl_msg, id, 8);
OFF(molly_ctl_msg, uid, 16);
OFF(molly_ctl_msg, gid, 20);
OFF(molly_ctl_msg, pid, 24);
OFF(molly_ctl_msg, cgroup_id, 32);
OFF(molly_ctl_msg, comm, 40);
OFF(molly_ctl_msg, submit, 56);

/* The ioctl numbers carry the sizes, so they too are the same everywhere. */
ABI_ASSERT(MOLLY_IOC_VERSION == 0xc030b700u, "MOLLY_IOC_VERSION");
ABI_ASSERT(MOLLY_IOC_SUBMIT == 0xc0d0b701u, "MOLLY_IOC_SUBMIT");
ABI_ASSERT(MOLLY_IOC_CANCEL == 0x4010b702u, "MOLLY_IOC_CANCEL");
ABI_ASSERT(MOLLY_IOC_STATUS == 0xc028b703u, "MOLLY_IOC_STATUS");
/* Records stay 8-byte aligned in a read() buffer. */
ABI_ASSERT(sizeof(struct molly_event) % 8 == 0, "event header alignment");
ABI_ASSERT(sizeof(struct molly_event) + sizeof(struct molly_error) <= MOLLY_EVENT_MAX,
	   "an error record fits MOLLY_EVENT_MAX");

int main(void)
{
	return 0;
}
