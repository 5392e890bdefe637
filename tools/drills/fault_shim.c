/* An LD_PRELOAD shim for drill 4 (tools/drills/d4_iofault.py): makes write(), fsync() or
 * rename() fail with a chosen errno for paths under one directory, as a full disk or a
 * failing device would. Build: gcc -shared -fPIC -O2 -o fault_shim.so fault_shim.c -ldl
 *
 *   FAULT_SHIM_OP     write | fsync | rename
 *   FAULT_SHIM_UNDER  only calls on paths under this prefix fail (fd paths via /proc)
 *   FAULT_SHIM_ERRNO  ENOSPC (default) | EIO | EDQUOT | EROFS
 *   FAULT_SHIM_NTH    the first N-1 matching calls succeed, the Nth and later fail (1)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int armed(const char *op) {
  const char *want = getenv("FAULT_SHIM_OP");
  return want && strcmp(want, op) == 0;
}

static int under(const char *path) {
  const char *prefix = getenv("FAULT_SHIM_UNDER");
  return prefix && path && strncmp(path, prefix, strlen(prefix)) == 0;
}

static int fd_under(int fd) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n < 0) return 0;
  path[n] = 0;
  return under(path);
}

/* Counts matching calls; nonzero once the Nth is reached. Not thread-exact, and need not
 * be: the drill only needs "from some call on, this operation fails". */
static int due(void) {
  static int seen;
  const char *nth = getenv("FAULT_SHIM_NTH");
  return ++seen >= (nth ? atoi(nth) : 1);
}

static int fail(void) {
  const char *e = getenv("FAULT_SHIM_ERRNO");
  errno = !e || !strcmp(e, "ENOSPC") ? ENOSPC
          : !strcmp(e, "EIO")        ? EIO
          : !strcmp(e, "EDQUOT")     ? EDQUOT
                                     : EROFS;
  return -1;
}

ssize_t write(int fd, const void *buf, size_t count) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (fd > 2 && armed("write") && fd_under(fd) && due()) return fail();
  return real(fd, buf, count);
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (armed("fsync") && fd_under(fd) && due()) return fail();
  return real(fd);
}

int rename(const char *from, const char *to) {
  static int (*real)(const char *, const char *);
  if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
  if (armed("rename") && (under(from) || under(to)) && due()) return fail();
  return real(from, to);
}
