// placeholder: the issue 5 core work fills it
#include "core/merge.h"
