#include "cli_util.hpp"
