// A deliberately wrong include: the CLI talks to kvasird over HTTP only.
#include "ipc/segment.h"
