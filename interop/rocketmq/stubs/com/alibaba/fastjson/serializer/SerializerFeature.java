package com.alibaba.fastjson.serializer;

/** Stand-in for fastjson's enum (see ../JSON.java); the Gson stand-in ignores it. */
public enum SerializerFeature {
    PrettyFormat, WriteMapNullValue, WriteClassName, DisableCircularReferenceDetect
}
