"""sketchql.planner"""
