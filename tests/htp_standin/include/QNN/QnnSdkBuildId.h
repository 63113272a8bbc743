// Stand-in: the version the stand-in API follows.
#pragma once
#define QNN_SDK_BUILD_ID "v2.43.0.standin"
