"""(being written)"""
class Dataset: pass
class Loader: pass
class Resize: pass
class RandomCrop: pass
class CenterCrop: pass
class HFlip: pass
class ColorJitter: pass
class Normalize: pass
