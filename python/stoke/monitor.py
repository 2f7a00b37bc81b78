"""(being written)"""
class Monitor: pass
def probe(): pass
def recommend(): pass
