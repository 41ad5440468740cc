"""A module whose import ends the process at once (no exception to catch): a fork server preloading
it dies before it is ready, and the supervisor must hear why instead of waiting."""

import os

os._exit(3)
