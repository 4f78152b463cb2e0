#include "core/edit.h"
