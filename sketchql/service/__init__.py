"""sketchql.service"""
