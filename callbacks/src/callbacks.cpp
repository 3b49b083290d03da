// The umbrella header compiles on its own.
#include <torchbus/callbacks/callbacks.hpp>
