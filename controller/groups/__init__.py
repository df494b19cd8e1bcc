"""Groups: the queues sharing one downstream, decided as one around each queue's own limit
algorithm (docs/algorithms.md, "Groups: queues sharing one downstream").

``estimate`` pools the members' evidence into what the downstream accepts, ``shares`` divides
it (max-min fair by demand, weight and priority; time-sharing below the group's floor), and
``law`` turns the shares into the members' decisions.
"""

from controller.groups.estimate import GroupMemory
from controller.groups.law import Governed, Member, govern

__all__ = ["Governed", "GroupMemory", "Member", "govern"]
