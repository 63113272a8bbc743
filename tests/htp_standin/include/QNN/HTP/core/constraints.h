// Stand-in: see qco_standin.h.
#pragma once
#include "../../qco_standin.h"
