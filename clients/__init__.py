"""NumPyClients (imported as ``fedram_flwr.clients``): the local objectives."""

from fedram_flwr.clients.ca_fed import CAFedClient
from fedram_flwr.clients.cvar import CVaRClient
from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.clients.rc_fl import RCFLClient
from fedram_flwr.clients.scaffold import ScaffoldClient

__all__ = ["CAFedClient", "CVaRClient", "ERMClient", "RCFLClient", "ScaffoldClient"]
