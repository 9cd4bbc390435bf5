#include <seccomp.h>
