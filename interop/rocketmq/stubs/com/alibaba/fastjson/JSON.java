package com.alibaba.fastjson;

import com.alibaba.fastjson.serializer.SerializerFeature;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.reflect.TypeToken;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Stand-in for fastjson, which Debian does not package: the few static methods RocketMQ's remoting,
 * store and DLedger code call, done with Gson (Debian's libgoogle-gson-java). On the paths the
 * interop check runs, only DefaultMessageStore's ScheduleMessageService uses it: it reads and writes
 * config/delayOffset.json ({"offsetTable": {"level": offset}}).
 */
public abstract class JSON {
    private static final Gson GSON = new Gson();
    private static final Gson PRETTY = new GsonBuilder().setPrettyPrinting().create();

    public static String toJSONString(Object object) {
        return GSON.toJson(object);
    }

    public static String toJSONString(Object object, boolean prettyFormat) {
        return (prettyFormat ? PRETTY : GSON).toJson(object);
    }

    public static String toJSONString(Object object, SerializerFeature... features) {
        return GSON.toJson(object);
    }

    public static byte[] toJSONBytes(Object object, SerializerFeature... features) {
        return GSON.toJson(object).getBytes(StandardCharsets.UTF_8);
    }

    public static <T> T parseObject(String text, Class<T> clazz) {
        return GSON.fromJson(text, clazz);
    }

    public static <T> T parseObject(byte[] bytes, Type type) {
        return GSON.fromJson(new String(bytes, StandardCharsets.UTF_8), type);
    }

    public static <T> List<T> parseArray(String text, Class<T> clazz) {
        return GSON.fromJson(text, TypeToken.getParameterized(List.class, clazz).getType());
    }
}
